"""The cause rule (rule.py): what makes a fleet-wide or a group effect a cause."""

from __future__ import annotations

import dataclasses

from minutiae.analyses.whatchanged.groups import GroupSplit
from minutiae.analyses.whatchanged.rule import RULE, CauseRule
from minutiae.analyses.whatchanged.stats import Effect


def _effect(change: float, p: float) -> Effect:
    return Effect(change, p, 0.004, 300, 300)


def _split(p: float, sigs: tuple[str, ...] = ("moe-a", "moe-b"), p_robust: float = 0.001,
           tested: int = 3, partial: bool = True) -> GroupSplit:
    return GroupSplit("family", (("moe", _effect(0.03, p)),), _effect(0.03, p), None, 12, sigs,
                      0.001, p_robust, tested, partial)


def test_fleet_cause_is_bonferroni_over_rollouts_with_a_floor_and_an_overlap() -> None:
    rule = CauseRule(alpha=0.01, min_effect=0.005, min_overlap=20)
    assert rule.fleet_cause(_effect(0.02, 0.0019), 20, 5)
    assert not rule.fleet_cause(_effect(0.02, 0.0021), 20, 5)      # 0.01 / 5 rollouts
    assert not rule.fleet_cause(_effect(0.004, 1e-9), 20, 5)       # under the floor
    assert not rule.fleet_cause(_effect(-0.02, 1e-9), 19, 5)       # too few comparable runs
    assert rule.fleet_cause(_effect(-0.02, 1e-9), 20, 5)
    assert not rule.fleet_cause(None, 100, 5)


def test_group_cause_is_also_corrected_for_the_groupings_tried() -> None:
    rule = CauseRule(alpha=0.01, group_bonferroni=True)
    assert rule.group_cause(_split(0.0006), 50, 5)                   # < 0.01 / (5 x 3)
    assert not rule.group_cause(_split(0.0007), 50, 5)
    assert dataclasses.replace(rule, group_bonferroni=False).group_cause(_split(0.0019), 50, 5)
    assert not rule.group_cause(_split(0.0001), 19, 5)              # overlap of the hit groups


def test_one_signature_or_an_uneven_fleet_wide_change_is_never_a_group_cause() -> None:
    # leave-one-out is not required at the shipped point, but a hit of one signature (p_robust
    # 1.0 by definition) is that model's own change as likely as the rollout's
    assert RULE.robust_p == 1.0
    assert not RULE.group_cause(_split(1e-9, sigs=("moe-a",), p_robust=1.0), 50, 5)
    assert RULE.group_cause(_split(1e-9, p_robust=0.5), 50, 5)
    assert not RULE.group_cause(_split(1e-9, partial=False), 50, 5)
    assert not CauseRule(robust_p=0.05).group_cause(_split(1e-9, p_robust=0.5), 50, 5)


def test_a_group_effect_under_the_group_floor_is_not_a_cause() -> None:
    small = dataclasses.replace(_split(1e-9), hit_effect=_effect(RULE.group_min_effect * 0.9, 1e-9))
    assert not RULE.group_cause(small, 50, 5)

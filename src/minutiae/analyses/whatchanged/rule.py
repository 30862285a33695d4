"""When a rollout is called a cause: the decision rule of rollout attribution, in one place (pure).

The fits (``rollouts.py``, ``groups.py``) produce effects and p-values; this rule turns them into
``cause``. Its thresholds are one frozen value so a benchmark can trace the precision/recall
curve of the rule on training fleets and pick the operating point by a stated rule
(``bench/regress/operating.py``); the defaults are that operating point (docs/regress.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minutiae.analyses.whatchanged.groups import GroupSplit
    from minutiae.analyses.whatchanged.stats import Effect


@dataclass(frozen=True, slots=True)
class CauseRule:
    """``alpha``: family-wise false-alarm rate over the rollouts tested (Bonferroni);
    ``min_effect``: smallest fleet-wide effect called a cause (fraction); ``min_overlap``: fewest
    runs on each side, on days when both ran; ``group_min_effect``: smallest pooled effect on the
    hit groups called a cause (a split has more ways to fit chance and to absorb a confounder
    than the fleet-wide estimate); ``het_alpha``: rate of the screen that the group effects
    differ (Bonferroni over groupings); ``group_p``: a group is hit when its own effect has p
    below this; ``robust_p``: the pooled hit effect must stay below this with any one hit
    signature left out (1.0: not required, but a hit of a single signature, whose p_robust is
    1.0, is never a group cause: that is one model's own change); ``group_bonferroni``: the pooled hit effect's test is also corrected for
    the groupings tried (else only for the rollouts)."""

    alpha: float = 0.01
    min_effect: float = 0.005
    min_overlap: int = 20
    group_min_effect: float = 0.015
    het_alpha: float = 0.05
    group_p: float = 0.05
    robust_p: float = 1.0
    group_bonferroni: bool = True

    def fleet_cause(self, effect: Effect | None, overlap: int, n_rollouts: int) -> bool:
        """The fleet-wide effect is a cause."""
        return bool(effect is not None and effect.p_value < self.alpha / max(n_rollouts, 1)
                    and abs(effect.change) >= self.min_effect and overlap >= self.min_overlap)

    def group_cause(self, split: GroupSplit | None, hit_overlap: int, n_rollouts: int) -> bool:
        """The pooled effect on the hit groups of a partial split is a cause."""
        if split is None or not split.partial or split.hit_effect is None:
            return False
        he = split.hit_effect
        tests = max(n_rollouts, 1) * (split.tested if self.group_bonferroni else 1)
        return bool(split.p_heterogeneity < self.het_alpha and he.p_value < self.alpha / tests
                    and split.p_robust < self.robust_p and abs(he.change) >= self.group_min_effect
                    and hit_overlap >= self.min_overlap)


#: the operating point in use: chosen by ``bench/regress/operating.py`` on training seeds 7000
#: (75 fleets; the grid point of largest min(P, R) at the family-wise rate 0.01: P 0.991,
#: R 0.867, where the rule before it, screen 0.01 and leave-one-out 0.05, had R 0.817);
#: held-out figures in docs/regress.md
RULE = CauseRule()

__all__ = ["RULE", "CauseRule"]

"""Rollouts that hit only some models: the group split of attribute_rollouts."""

from __future__ import annotations

import dataclasses

import pytest

from minutiae.analyses.whatchanged.rollouts import attribute_rollouts
from minutiae.history.rollouts import group_rollouts
from minutiae.testing.synth.regress import NEW_VERSIONS, FleetConfig, RolloutSpec, synth_fleet

FAMILIES = ("moe", "gpt", "llama", "vit")


def _fleet(effect: float, hit: int, empty: float = 0.0, seed: int = 7,  # type: ignore[no-untyped-def]
           others: float = 0.0):
    """NCCL slows the first ``hit`` families by ``effect``, the other families by ``others``."""
    specs = (RolloutSpec("nccl", 0.0, 0.8, 20.0, 3.0), RolloutSpec("kernel", 0.0, 0.7, 12.0, 4.0))
    f = synth_fleet(FleetConfig(seed=seed, rollouts=specs, missing_version_rate=empty,
                                code_regression_rate=0.0))
    sigs = sorted({r.signature for r in f.records})
    fam = {s: FAMILIES[i % 4] for i, s in enumerate(sigs)}
    out = []
    for r in f.records:
        v = r.value
        if NEW_VERSIONS["nccl"] in r.attrs.get("nccl", ()):
            v *= 1.0 + (effect if fam[r.signature] in FAMILIES[:hit] else others)
        out.append(dataclasses.replace(r, signature=f"{fam[r.signature]}-{r.signature}", value=v))
    return out, group_rollouts(f.changes)


@pytest.mark.parametrize("empty", [0.0, 0.05])
def test_an_nccl_change_that_hurts_only_moe_is_a_cause(empty: float) -> None:
    runs, rolls = _fleet(0.03, 1, empty)
    v = {x.attr: x for x in attribute_rollouts(runs, rolls)}
    nccl, kernel = v["nccl"], v["kernel"]
    assert nccl.cause and nccl.groups is not None and nccl.groups.grouping == "family"
    assert [g for g, _ in nccl.groups.hit] == ["moe"] and nccl.groups.partial
    assert nccl.groups.hit_effect is not None and abs(nccl.groups.hit_effect.change - 0.03) < 0.01
    assert nccl.summary().startswith("nccl 2.23.4: +")
    assert "signatures (moe-*), 0 on the rest" in nccl.summary()
    assert nccl.by_signature and all(s.startswith("moe-") for s, _ in nccl.by_signature)
    assert not kernel.cause


def test_a_fleet_wide_change_is_not_split() -> None:
    runs, rolls = _fleet(0.03, 4)
    nccl = next(x for x in attribute_rollouts(runs, rolls) if x.attr == "nccl")
    assert nccl.cause and nccl.groups is None and "fleet-wide" in nccl.summary()


def test_an_uneven_fleet_wide_change_is_said_as_it_is_and_tested_fleet_wide() -> None:
    # +6 % on MoE, +2 % on every other family: not "a rollout that hits some models" -- its
    # split is shown, but it is tested and netted out of the other rollouts as fleet-wide
    runs, rolls = _fleet(0.06, 1, others=0.02)
    v = {x.attr: x for x in attribute_rollouts(runs, rolls)}
    nccl = v["nccl"]
    assert nccl.cause and nccl.effect is not None and 0.02 < nccl.effect.change < 0.06
    assert nccl.groups is not None and not nccl.groups.partial
    assert nccl.groups.rest is not None and nccl.groups.rest.change > 0.01
    assert "(moe-*), +" in nccl.summary() and "% on the rest" in nccl.summary()
    assert not v["kernel"].cause


def test_no_effect_no_cause() -> None:
    runs, rolls = _fleet(0.0, 1)
    assert not any(x.cause for x in attribute_rollouts(runs, rolls))


def test_whatchanged_lists_each_candidate_once_and_says_when_nothing_is_significant() -> None:
    from minutiae.analyses.whatchanged.attribution import whatchanged

    specs = (RolloutSpec("driver", 0.0, 0.6, 15.0, 4.0), RolloutSpec("nccl", 0.0, 0.7, 30.0, 4.0))
    f = synth_fleet(FleetConfig(seed=3, rollouts=specs, slow_nodes=0, code_regression_rate=0.0))
    runs = sorted(f.records, key=lambda r: r.time)
    sig = runs[0].signature
    series = [r for r in runs if r.signature == sig]
    w = whatchanged(f.records, series[0].run_id, series[-1].run_id)
    keys = [(d.kind, d.key) for d in w.differences]
    assert len(keys) == len(set(keys)) and ("attr", "driver") in keys
    assert w.note.startswith("nothing that differs is significant")


def test_whatchanged_puts_the_significant_cause_first() -> None:
    from minutiae.analyses.whatchanged.attribution import whatchanged

    specs = (RolloutSpec("driver", 0.0, 0.6, 15.0, 4.0), RolloutSpec("nccl", 0.05, 1.0, 30.0, 2.0))
    f = synth_fleet(FleetConfig(seed=5, rollouts=specs, slow_nodes=0, code_regression_rate=0.0))
    runs = sorted(f.records, key=lambda r: r.time)
    new = NEW_VERSIONS["nccl"]
    for sig in sorted({r.signature for r in runs}):
        s = [r for r in runs if r.signature == sig]
        before = [r for r in s if new not in r.attrs.get("nccl", ())]
        after = [r for r in s if new in r.attrs.get("nccl", ())]
        if before and after and before[0].attrs.get("driver") != after[-1].attrs.get("driver"):
            w = whatchanged(f.records, before[0].run_id, after[-1].run_id)
            assert w.differences[0].key == "nccl" and w.note == ""
            return
    pytest.skip("no pair with both versions differing in this fleet")

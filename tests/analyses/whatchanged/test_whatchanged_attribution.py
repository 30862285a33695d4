"""whatchanged ranking and fleet rollout attribution find the injected cause."""

from __future__ import annotations

import pytest

from minutiae.analyses.whatchanged.attribution import whatchanged
from minutiae.analyses.whatchanged.rollouts import attribute_rollouts
from minutiae.errors import DataError
from minutiae.history.rollouts import group_rollouts
from minutiae.testing.synth.regress import FleetConfig, RolloutSpec, synth_fleet

OLD, NEW = "570.124.06", "570.158.01"


@pytest.fixture(scope="module")
def fleet():  # type: ignore[no-untyped-def]
    return synth_fleet(FleetConfig(seed=21, slow_nodes=0, code_regression_rate=0.0))


def test_driver_rollout_ranked_first(fleet) -> None:  # type: ignore[no-untyped-def]
    runs = sorted(fleet.records, key=lambda r: r.time)
    sig = runs[0].signature
    series = [r for r in runs if r.signature == sig]
    a = next(r for r in series if r.attrs["driver"] == {OLD})
    b = next(r for r in reversed(series) if NEW in r.attrs["driver"])
    w = whatchanged(fleet.records, a.run_id, b.run_id)
    top = w.differences[0]
    assert (top.kind, top.key, top.rank) == ("attr", "driver", 1)
    assert top.effect is not None and 0.02 < top.effect.change < 0.04 and top.effect.p_value < 1e-6
    assert "driver 570.158.01" in top.summary and "slower" in top.summary


def test_slow_node_ranked_first() -> None:
    f = synth_fleet(FleetConfig(seed=4, rollouts=(), slow_nodes=1, slow_node_effect=0.08,
                                code_regression_rate=0.0))
    (bad, onset), = f.slow_nodes.items()
    runs = sorted(f.records, key=lambda r: r.time)
    b = next(r for r in runs if bad in r.nodes and r.time > onset + 86400)
    a = [r for r in runs if r.signature == b.signature and bad not in r.nodes and r.time < onset][-1]
    w = whatchanged(f.records, a.run_id, b.run_id)
    top = w.differences[0]
    assert (top.kind, top.key) == ("node_added", bad)
    # measured from run A on (the node was fine before its onset): close to the injected 8 %
    assert top.effect is not None and 0.05 < top.effect.change < 0.11 and top.effect.p_value < 1e-6
    assert top.since is not None and top.since >= a.time and "since" in top.summary


def test_unknown_run_is_a_clear_error(fleet) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DataError, match="not in the history: nope"):
        whatchanged(fleet.records, fleet.records[0].run_id, "nope")


def test_rollouts_attributed_from_nodes_and_from_columns(fleet) -> None:  # type: ignore[no-untyped-def]
    for rollouts in (group_rollouts(fleet.changes), None):
        verdicts = {v.attr: v for v in attribute_rollouts(fleet.records, rollouts)}
        drv = verdicts["driver"]
        assert drv.cause and drv.effect is not None and abs(drv.effect.change - 0.03) < 0.008
        assert drv.gpu_hours_per_week is not None and drv.gpu_hours_per_week > 0
        assert not verdicts["kernel"].cause and not verdicts["firmware"].cause


def test_rollout_precision_recall_over_seeds() -> None:
    specs = (RolloutSpec("driver", 0.03, 0.6, 15.0, 4.0), RolloutSpec("nccl", -0.03, 0.7, 30.0, 4.0),
             RolloutSpec("kernel", 0.0, 0.8, 10.0, 4.0), RolloutSpec("image", 0.0, 0.5, 40.0, 4.0))
    tp = fp = fn = 0
    for seed in range(4):
        f = synth_fleet(FleetConfig(seed=100 + seed, rollouts=specs))
        truth = {r.attr: abs(r.effect) >= 0.02 for r in f.rollouts}
        for v in attribute_rollouts(f.records, group_rollouts(f.changes)):
            tp += v.cause and truth[v.attr]
            fp += v.cause and not truth[v.attr]
            fn += (not v.cause) and truth[v.attr]
    assert fp == 0 and tp >= 7 and fn <= 1


def test_two_way_projection_is_exact_least_squares() -> None:
    import numpy as np

    from minutiae.analyses.whatchanged.stats import make_panel

    f = synth_fleet(FleetConfig(seed=2, signatures=6, runs_per_signature=(20, 40), days=10))
    p = make_panel(f.records)
    n = len(p.runs)
    dummies = np.zeros((n, p.n_groups + p.n_bins))
    dummies[np.arange(n), p.g] = 1
    dummies[np.arange(n), p.n_groups + p.d] = 1
    x = np.random.default_rng(0).normal(size=(n, 3))
    ref = x - dummies @ np.linalg.lstsq(dummies, x, rcond=None)[0]
    assert np.abs(p.demean(x) - ref).max() < 1e-9
    assert np.abs(p.demean(x[:, 0]) - ref[:, 0]).max() < 1e-9


def test_nodes_that_only_carried_the_new_driver_lose_their_effect_net_of_it() -> None:
    f = synth_fleet(FleetConfig(seed=31, nodes=48, nodes_per_run=(2,), slow_nodes=0, code_regression_rate=0.0,
                                rollouts=(RolloutSpec("driver", 0.04, 0.3, 10.0, 1.0),)))
    upgraded = set(f.rollouts[0].nodes)
    runs = sorted(f.records, key=lambda r: r.time)
    b = next(r for r in reversed(runs) if set(r.nodes) <= upgraded)
    a = next(r for r in reversed(runs) if r.signature == b.signature and not set(r.nodes) & upgraded
             and r.time < b.time)
    w = whatchanged(f.records, a.run_id, b.run_id)
    top = w.differences[0]
    assert (top.kind, top.key) == ("attr", "driver") and top.joint is not None
    assert abs(top.joint.change - 0.04) < 0.01
    nodes = [d for d in w.differences if d.kind == "node_added" and d.joint is not None]
    assert nodes and all(d.effect is not None and d.effect.p_value < 1e-6 for d in nodes)   # alone: "guilty"
    assert all(d.joint is not None and d.joint.p_value > 0.01 and abs(d.joint.change) < 0.01 for d in nodes)

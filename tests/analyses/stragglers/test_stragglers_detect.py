"""Detection, latency and localisation on synthetic jobs with known truth (fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest

from minutiae.analyses.stragglers.analysis import Options, analyse
from minutiae.analyses.stragglers.calib import design, infer_groups, siegmund_arl0, threshold_for
from minutiae.analyses.stragglers.types import Basis, Scope
from minutiae.testing.synth.stragglers import (
    Fault,
    FaultKind,
    SynthJob,
    SynthSpec,
    as_matrix,
    score,
)


def _run(spec: SynthSpec, sections: bool = False, stage: bool = True,
         options: Options | None = None):
    job = SynthJob(spec)
    m = as_matrix(job, job.block(0, spec.steps, sections=sections))
    if not stage:
        m = type(m)(m.steps, m.ranks, m.total, m.compute, m.comm, m.node, m.gpu, None, m.leaf,
                    m.basis, ())
    report = analyse(m, options or Options())
    return job, report, *score(job, report.suspects)


def test_threshold_matches_siegmund_and_budget() -> None:
    h = threshold_for(0.5, 1e-10)
    assert siegmund_arl0(0.5, h) == pytest.approx(1e10, rel=1e-6)
    d = design(0.1, step_seconds=1.0, ranks_per_node=8)
    # 0.1 per 1,000 node-days at 1 s steps and 8 ranks/node, split over two detectors
    assert d.alpha == pytest.approx(1e-4 / (86_400 * 8))
    fast, slow = d.detectors
    assert fast.alpha == slow.alpha == pytest.approx(d.alpha / 2)
    # half of each test's share for Gaussian noise (the threshold), half for spikes (the clip)
    for t in (fast, slow):
        assert siegmund_arl0(t.k, t.h) == pytest.approx(2 / t.alpha, rel=1e-6)
    # three steps at the clip alarm, two (two GC pauses) never do
    assert fast.steps_at_clip == 3
    assert 3 * (fast.clip - fast.k) > fast.h > 2 * (fast.clip - fast.k)
    # a looser budget gives lower thresholds
    assert design(10.0, 1.0, 8).detectors[1].h < slow.h
    # a log keeping one step in 40 is tested 40x less often: each test may spend 40x more
    sparse = design(0.1, step_seconds=1.0, ranks_per_node=8, every=40)
    assert sparse.alpha == pytest.approx(40 * d.alpha) and sparse.logged_every == 40
    assert sparse.detectors[0].h < fast.h


def test_recall_latency_and_location_per_level() -> None:
    levels = {0.20: 3, 0.10: 5, 0.05: 20, 0.02: 100}
    faults = []
    for j, lvl in enumerate(levels):
        for i in range(12):
            faults.append(Fault(FaultKind.GPU, (j * 12 + i) * 16 + (i % 8), lvl, 60 + 7 * i))
    spec = SynthSpec(ranks=1024, steps=300, stages=4, faults=tuple(faults), seed=7)
    # what the test can see (no floor): the 2 % faults too
    job, report, outcomes, false = _run(spec, options=Options(min_slowdown=0.0))
    assert false == []
    for lvl, within in levels.items():
        got = [o for o in outcomes if o.fault.slowdown == lvl]
        ok = [o for o in got if o.detected and o.latency is not None and o.latency <= within]
        need = {0.20: 12, 0.10: 12, 0.05: 11, 0.02: 9}[lvl]
        assert len(ok) >= need, (lvl, [(o.detected, o.latency) for o in got])
        assert all(o.located for o in got if o.detected)
    # the estimate brackets the truth for the clear cases
    for s in report.suspects:
        truth = next(o.fault.slowdown for o in outcomes if o.component == s.component)
        if truth >= 0.05:
            assert abs(s.slowdown - truth) < 0.3 * truth + 0.01
            assert s.ci_low <= s.slowdown <= s.ci_high
    # with the default 3 % floor the 2 % GPUs are not suspects: they head the slowest-GPU list
    floored = analyse(as_matrix(job, job.block(0, spec.steps)))
    two = {r for o in outcomes if o.fault.slowdown == 0.02 for r in job.fault_ranks(o.fault)}
    assert {r for s in floored.suspects for r in s.ranks}.isdisjoint(two)
    assert floored.below_floor >= 9 and floored.min_slowdown == 0.03
    listed = [g.rank for g in floored.slowest]
    assert len(listed) == 10 and set(listed) <= two, listed
    # (over every step tested: the faults start at steps 60-137 of 300, so 0.8-1.6 %)
    assert all(0.005 < g.slowdown < 0.03 and g.gpu_hours_per_day > 0 for g in floored.slowest)


def test_node_gpu_and_leaf_localisation_with_sections() -> None:
    faults = (Fault(FaultKind.NODE, 9, 0.10, 80), Fault(FaultKind.GPU, 200, 0.15, 90),
              Fault(FaultKind.LEAF_COMM, 5, 0.30, 100))
    spec = SynthSpec(ranks=512, steps=240, stages=4, nodes_per_leaf=4, faults=faults, seed=3)
    job, report, outcomes, false = _run(spec, sections=True)
    assert false == []
    assert all(o.detected and o.located for o in outcomes), outcomes
    by = {s.component: s for s in report.suspects}
    assert by["node:gpu009"].scope is Scope.NODE and len(by["node:gpu009"].ranks) == 8
    assert by["node:gpu009"].basis is Basis.COMPUTE
    leaf = by["leaf:leaf005"]
    assert leaf.scope is Scope.LEAF and leaf.basis is Basis.COMMUNICATION
    assert 0.2 < leaf.slowdown < 0.4
    # the slow GPU waits least in the all-reduce: its compute, not its step, is what stands out
    gpu = by[job.component(faults[1])]
    assert gpu.basis is Basis.COMPUTE and 0.12 < gpu.slowdown < 0.18
    # cost: job slowdown x GPUs x 24 h
    assert gpu.gpu_hours_per_day == pytest.approx(gpu.job_slowdown * 512 * 24)


def test_no_alarm_on_stage_imbalance_gc_checkpoints_and_drift() -> None:
    spec = SynthSpec(ranks=2048, steps=600, stages=8, checkpoint_every=100, diurnal=0.2,
                     gc_rate=3e-4, loader_rate=1e-4, seed=11)
    _, report, _, false = _run(spec, stage=False)
    assert report.grouping.startswith("inferred")
    assert report.suspects == () and false == []
    assert 0.017 < report.noise < 0.023


def test_inferred_groups_contiguous_and_strided() -> None:
    rng = np.random.default_rng(0)
    stage_levels = np.log([1.0, 1.1, 0.93, 1.05])
    contiguous = np.repeat(stage_levels, 64) + rng.normal(0, 0.004, 256)
    groups, how = infer_groups(contiguous)
    assert "contiguous" in how
    assert len(set(zip(groups.tolist(), np.repeat(np.arange(4), 64).tolist(), strict=True))) == len(set(groups.tolist()))
    strided = np.tile(stage_levels, 64) + rng.normal(0, 0.004, 256)
    groups, how = infer_groups(strided)
    assert "strided" in how and (groups == np.arange(256) % 4).all()
    flat, how = infer_groups(rng.normal(0, 0.004, 256))
    assert (flat == 0).all() and how.startswith("one group")
    # a slow node (8 ranks) never becomes a stage of its own
    slow = rng.normal(0, 0.004, 256)
    slow[40:48] += 0.1
    g, _ = infer_groups(slow)
    assert (g == 0).all()


def test_stopped_rank_is_a_finding() -> None:
    job = SynthJob(SynthSpec(ranks=64, steps=120, seed=2))
    b = job.block(0, 120)
    b.compute[70:, 13] = np.nan
    m = as_matrix(job, b)
    report = analyse(m, Options())
    assert [(s.rank, s.last_step, s.job_last_step) for s in report.stopped] == [(13, 69, 119)]
    assert report.suspects == ()


def test_node_test_finds_a_mildly_slow_node_before_its_ranks() -> None:
    spec = SynthSpec(ranks=512, steps=200, stages=4, seed=21,
                     faults=(Fault(FaultKind.NODE, 30, 0.04, 100),))
    job, report, outcomes, false = _run(spec)
    assert false == []
    (o,) = outcomes
    assert o.detected and o.located and o.latency is not None and o.latency <= 8
    (s,) = report.suspects
    assert s.scope is Scope.NODE and s.component == "node:gpu030" and len(s.ranks) == 8
    assert 0.025 < s.slowdown < 0.055 and s.ci_low < 0.04 < s.ci_high


def test_role_column_separates_peers() -> None:
    import polars as pl

    from minutiae.analyses.stragglers.prep import prepare

    job = SynthJob(SynthSpec(ranks=64, steps=80, stages=1, seed=4))
    t = job.table().with_columns(
        pl.when(pl.col("rank") % 2 == 0).then(pl.lit("expert")).otherwise(pl.lit("dense")).alias("role"),
        pl.when(pl.col("rank") % 2 == 0).then(pl.col("seconds") * 1.15).otherwise(pl.col("seconds")).alias("seconds"))
    report = analyse(prepare(t, "roles.csv"))
    assert report.grouping == "by stage column" and report.groups == 2
    assert report.suspects == ()

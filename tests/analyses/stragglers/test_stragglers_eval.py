"""Regression: ``minutiae eval`` once failed with ``ValueError: zip() argument 2 is shorter`` in the
straggler analysis (issue 4). ``SeriesDetector.update_ratio`` scored a new alarm by zipping the
per-test runs (alarm tests + the estimation-only CUSUM) against the alarm tests alone, strict:
every block in which a rank first alarmed crashed. The score now indexes the alarm tests.

These tests run the alarm path on the simulator's timing layout (``step,rank,seconds,node,gpu,
stage,time``) in the shapes eval meets (a rank that stops reporting, one node, one stage, no
steps after warm-up, duplicated steps, no node/gpu columns) and check that eval reports a crash
in a job loudly (a count in the detector's status), not only as a note.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minutiae.analyses.stragglers.analysis import Options, StragglerAnalysis, analyse
from minutiae.analyses.stragglers.detect import SeriesDetector
from minutiae.analyses.stragglers.prep import prepare
from minutiae.analyses.stragglers.types import Basis, Scope
from minutiae.errors import InputError
from minutiae.testing.synth.stragglers import Fault, FaultKind, SynthJob, SynthSpec

WHERE = "timings/100001.parquet"


def _sim_table(nodes: int, gpus: int, stages: int, steps: int, slow_rank: int, slowdown: float,
               seed: int) -> pl.DataFrame:
    """A job in the simulator's timings layout, ``slow_rank`` slower from the first step."""
    rng = np.random.default_rng(seed)
    n = nodes * gpus
    sec = 4.0 * np.exp(rng.normal(0.0, 0.02, (steps, n)))
    sec[:, slow_rank] *= 1.0 + slowdown
    step = np.repeat(np.arange(100, 100 + steps), n)
    rank = np.tile(np.arange(n), steps)
    return pl.DataFrame({
        "step": step, "rank": rank.astype(np.int32), "seconds": sec.ravel(),
        "node": [f"gpu{r // gpus + 1:03d}" for r in rank.tolist()],
        "gpu": (rank % gpus).astype(np.int8), "stage": (rank % stages).astype(np.int16),
        "time": 1.7e9 + step * 4.0})


def test_alarm_block_scores_over_the_alarm_tests_only() -> None:
    """The block in which a rank first alarms (the path that crashed) scores it against the
    alarm thresholds: score = max over the alarm tests of statistic / h, > 1 when alarmed."""
    m = prepare(_sim_table(4, 8, 1, 60, 13, 0.25, 1), WHERE)
    a = StragglerAnalysis(m.slice(0, 20), Options(), WHERE)
    det = a.compute
    assert isinstance(det, SeriesDetector) and len(det.tests) == 2
    r = det.ratios(m.slice(20, 60).compute)
    new = det.update_ratio(r, m.steps[20:60])
    assert new.tolist() == [13]
    score = float(det.alarm_score[13])
    assert 1.0 < score < 10.0
    assert det.alarm_step[13] >= 120


def test_slow_gpu_in_a_simulated_job_is_found() -> None:
    rep = analyse(prepare(_sim_table(4, 8, 2, 80, 21, 0.2, 2), WHERE), Options(ranks_per_node=8),
                  WHERE)
    assert [s.component for s in rep.suspects] == ["gpu:gpu003/5"]
    assert rep.suspects[0].scope is Scope.GPU
    assert 0.15 < rep.suspects[0].slowdown < 0.25 and rep.suspects[0].score > 1.0


def test_slow_node_alarms_in_the_same_block_as_its_ranks() -> None:
    """Node test and rank tests alarming together (several ranks in one block)."""
    job = SynthJob(SynthSpec(ranks=64, steps=120, stages=1, seed=3,
                             faults=(Fault(FaultKind.NODE, 2, 0.15, 30),)))
    rep = analyse(prepare(job.table(), WHERE), Options(ranks_per_node=8), WHERE)
    assert rep.suspects and rep.suspects[0].component == job.component(job.spec.faults[0])
    assert all(np.isfinite(s.score) and s.score > 1.0 for s in rep.suspects)



def test_communication_alarms_score_over_the_alarm_tests() -> None:
    """The communication series goes through the same alarm path (section timings)."""
    fault = Fault(FaultKind.LEAF_COMM, 0, 0.3, 30)
    job = SynthJob(SynthSpec(ranks=64, steps=150, stages=1, seed=4, faults=(fault,)))
    rep = analyse(prepare(job.table(sections=True), WHERE), Options(ranks_per_node=8), WHERE)
    slow = set(job.fault_ranks(fault).tolist())
    assert rep.suspects and all(s.basis is Basis.COMMUNICATION for s in rep.suspects)
    assert all(set(s.ranks) <= slow and 1.0 < s.score < 10.0 for s in rep.suspects)
    assert set().union(*(s.ranks for s in rep.suspects)) == slow

@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(1, 4), gpus=st.integers(1, 8), stages=st.integers(1, 3),
       extra=st.integers(0, 40), slow=st.integers(0, 31), slowdown=st.sampled_from([0.0, 0.1, 0.5]),
       stop_at=st.one_of(st.none(), st.integers(0, 60)), dup=st.integers(0, 30),
       drop=st.sampled_from([(), ("node",), ("gpu",), ("node", "gpu"), ("stage",)]),
       seed=st.integers(0, 3))
def test_simulated_job_shapes_never_crash(nodes: int, gpus: int, stages: int, extra: int,
                                          slow: int, slowdown: float, stop_at: int | None,
                                          dup: int, drop: tuple[str, ...], seed: int) -> None:
    """Whatever the job's shape, the analysis eval runs returns a report or a clear error
    naming the file (eval counts anything else as a failed job)."""
    n = nodes * gpus
    opts = Options(ranks_per_node=gpus)
    df = _sim_table(nodes, gpus, stages, opts.warmup + 3 + extra, slow % n, slowdown, seed)
    if stop_at is not None:  # a rank that stops reporting
        df = df.filter((pl.col("rank") != (slow + 1) % n) | (pl.col("step") < 100 + stop_at))
    if dup:  # duplicated step rows (a restarted job writes its last steps again)
        df = pl.concat([df, df.tail(dup * n)])
    df = df.drop(list(drop))
    try:
        rep = analyse(prepare(df, WHERE, {f"gpu{i + 1:03d}": "leaf01" for i in range(nodes)}),
                      opts, WHERE)
    except InputError as exc:
        assert WHERE in str(exc)
        return
    assert rep.ranks == df["rank"].n_unique()  # a rank that never reported is not compared
    assert all(np.isfinite(s.score) for s in rep.suspects)
    if slowdown >= 0.5 and n >= 8 and stop_at is None and "stage" in drop:
        assert any((slow % n) in s.ranks for s in rep.suspects)


def test_eval_counts_crashed_jobs_in_the_status(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A job whose analysis crashes is counted in the detector's status and JSON, not only
    listed among the notes (eval carries on with the other jobs)."""
    import minutiae.analyses.stragglers.runs as stragglers_mod  # eval's path: analyse_runs
    from minutiae.sim.api import run_sim
    from minutiae.sim.dataset import load_dataset
    from minutiae.sim.eval.detectors import Failure
    from minutiae.sim.eval.run import run_detectors

    run_sim(tmp_path / "ds", nodes=4, gpus_per_node=8, days=0.3, seed=3)
    ds = load_dataset(tmp_path / "ds")
    clean = run_detectors(ds, ["stragglers"])[0]
    assert clean.reason == "ok" and clean.failed == 0
    if clean.inputs == 0:
        pytest.skip("no job with enough steps in this tiny dataset")
    real = stragglers_mod.analyse
    seen: list[str] = []

    def crash_first(m, options, where):  # type: ignore[no-untyped-def]
        seen.append(where)
        if len(seen) == 1:
            raise ValueError("zip() argument 2 is shorter than argument 1")
        return real(m, options, where)

    monkeypatch.setattr(stragglers_mod, "analyse", crash_first)
    res = run_detectors(ds, ["stragglers"])[0]
    assert res.failed == 1 and res.inputs == clean.inputs == len(seen)
    assert res.reason.startswith(f"1 of {clean.inputs} inputs failed")
    assert seen[0] in res.reason and "zip() argument 2 is shorter" in res.reason
    assert sum(isinstance(x, Failure) for x in res.notes) == 1
    assert res.to_json()["failed"] == 1

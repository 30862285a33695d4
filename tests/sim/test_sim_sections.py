"""Section timings of the simulated jobs (sim/timings.py): a slow GPU slows its compute
sections and makes its peers wait in allreduce; a slow link slows the rank's own transfer;
totals = compute + allreduce; the straggler analysis names compute vs communication, and the
scorecard counts whether it named it right."""

from __future__ import annotations

import numpy as np
import polars as pl

from minutiae.analyses.stragglers.analysis import Options, analyse
from minutiae.analyses.stragglers.prep import prepare
from minutiae.scoring.score import Detection, score
from minutiae.scoring.truth import TruthEvent
from minutiae.sim.emit.timings import SECTIONS, has_sections, job_timings
from minutiae.sim.world.plan import Job

T0 = 1_736_000_000.0
CFG: dict[str, object] = {"pipeline_stages": 1, "stage_imbalance": [0.0], "rank_noise": 0.02,
                          "seqlen_cv": 0.02, "section_share": 1.0, "comm_fraction": 0.2}


def _ev(cls: str, node: str, gpu: int, slow: float) -> TruthEvent:
    return TruthEvent("f1", cls, node, f"gpu:{gpu}", T0 + 3600, T0 + 8 * 3600, "warning", False,
                      ("timings",), True, {"gpu": gpu, "slowdown": slow})


def _table(events: dict[str, list[TruthEvent]]) -> pl.DataFrame:
    job = Job("7", T0, T0 + 8 * 3600, ("n1", "n2"), "sig", 6.0, "completed")
    tab, _ = job_timings(job, 8, events, 60.0, CFG, np.random.default_rng(1))
    return pl.from_arrow(tab)  # type: ignore[return-value]


def _mean(df: pl.DataFrame, section: str | None, rank: int, late: bool = True) -> float:
    sel = df.filter((pl.col("rank") == rank) & (pl.col("time") >= T0 + 4 * 3600 if late else pl.col("time") < T0 + 3600))
    sel = sel.filter(pl.col("section").is_null() if section is None else pl.col("section") == section)
    return float(sel["seconds"].mean())  # type: ignore[arg-type]


def test_sections_add_up_and_a_slow_gpu_makes_its_peers_wait() -> None:
    df = _table({"n1": [_ev("thermal_throttle", "n1", 3, 0.15)]})
    assert set(df["section"].unique().to_list()) == {None, "forward", "backward", "optimizer", "allreduce"}
    wide = df.pivot(on="section", index=["step", "rank"], values="seconds")
    parts = sum(wide[n] for n, _ in SECTIONS) + wide["allreduce"]
    assert np.allclose(parts.to_numpy(), wide["null"].to_numpy(), rtol=1e-4)
    slow = _mean(df, "forward", 3) / _mean(df, "forward", 3, late=False)
    peer = _mean(df, "forward", 0) / _mean(df, "forward", 0, late=False)
    assert slow > 1.12 and 0.95 < peer < 1.05        # compute of the throttled GPU only
    # the others wait for it in the all-reduce (its compute is 15 % of 4.8 s longer); it waits least
    assert _mean(df, "allreduce", 0) - _mean(df, "allreduce", 0, late=False) > 0.4
    assert _mean(df, "allreduce", 3) < _mean(df, "allreduce", 0)


def test_a_slow_link_slows_only_that_ranks_transfer() -> None:
    df = _table({"n2": [_ev("ib_link_flap", "n2", 5, 0.15)]})
    r = 8 + 5
    assert 0.95 < _mean(df, "backward", r) / _mean(df, "backward", r, late=False) < 1.05
    assert _mean(df, "allreduce", r) > 1.5 * _mean(df, "allreduce", r, late=False)
    assert _mean(df, None, r) > 1.1 * _mean(df, None, 0)


def test_the_analysis_names_compute_and_communication_and_the_scorecard_scores_it() -> None:
    bases = {}
    for cls, node, gpu in (("thermal_throttle", "n1", 3), ("ib_link_flap", "n2", 5)):
        df = _table({node: [_ev(cls, node, gpu, 0.15)]})
        rep = analyse(prepare(df, "job7.parquet"), Options(ranks_per_node=8), "job7.parquet")
        assert rep.suspects, cls
        bases[cls] = {s.basis.value for s in rep.suspects}
    assert bases == {"thermal_throttle": {"compute"}, "ib_link_flap": {"communication"}}
    truth = [_ev("thermal_throttle", "n1", 3, 0.15), TruthEvent(
        "f2", "ib_link_flap", "n2", "gpu:5", T0 + 3600, T0 + 8 * 3600, "warning", False, ("timings",),
        True, {"gpu": 5, "slowdown": 0.15})]
    dets = [Detection("stragglers", "n1", T0 + 4000, "straggler", basis="compute"),
            Detection("stragglers", "n2", T0 + 4000, "straggler", basis="compute")]
    assert score(truth, dets, 2.0).basis == {"right": 1, "wrong": 1}


def test_a_share_of_jobs_logs_sections_by_job_id() -> None:
    picked = sum(has_sections(str(j), 0.25) for j in range(4000))
    assert 900 < picked < 1100
    assert not has_sections("1", 0.0) and has_sections("1", 1.0)

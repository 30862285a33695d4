"""The default profile's timing cadence must give the straggler analysis enough logged steps.

At ``timing_interval_s = 600`` a 2-hour job (the profile's shortest) logged 12 steps, fewer than
the analysis' 20-step warm-up + 3, so eval skipped a third of the demo's jobs."""

from __future__ import annotations

import numpy as np
import polars as pl

from minutiae.analyses.stragglers.analysis import Options, analyse
from minutiae.analyses.stragglers.prep import prepare
from minutiae.scoring.truth import TruthEvent
from minutiae.sim.emit.timings import job_timings
from minutiae.sim.world.plan import Job
from minutiae.sim.world.profile import load_profile

T0 = 1_736_121_600.0
NODES = tuple(f"gpu{i:03d}" for i in range(1, 9))


def _shortest_job() -> tuple[Job, dict[str, object], float]:
    prof = load_profile()
    hours = float(prof.jobs["duration_hours"][0])
    sig = prof.signatures[0]
    job = Job("1", T0, T0 + hours * 3600.0, NODES, sig.name, sig.step_s, "completed")
    return job, prof.jobs, float(prof.sampling["timing_interval_s"])


def test_shortest_default_job_logs_more_steps_than_the_warmup() -> None:
    job, jobs_cfg, interval = _shortest_job()
    tab, _ = job_timings(job, 8, {}, interval, jobs_cfg, np.random.default_rng(1))
    steps = pl.from_arrow(tab)["step"].n_unique()  # type: ignore[index]
    assert steps >= Options().warmup + 3, f"{steps} logged steps at {interval:g} s"


def test_persistent_straggler_in_the_shortest_default_job_is_found() -> None:
    job, jobs_cfg, interval = _shortest_job()
    slow = TruthEvent("f1", "persistent_straggler", "gpu005", "host", T0, T0 + 30 * 86400.0,
                      "warning", False, ("timings",), details={"slowdown": 0.10})
    tab, _ = job_timings(job, 8, {"gpu005": [slow]}, interval, jobs_cfg, np.random.default_rng(1))
    df = pl.from_arrow(tab)
    assert isinstance(df, pl.DataFrame)
    rep = analyse(prepare(df, "job 1"), Options(ranks_per_node=8), "job 1")
    assert [s.component for s in rep.suspects] == ["node:gpu005"]
    # the peers are the node's pipeline stage (16 ranks, half of them on gpu005): the peer
    # median sits between the two nodes, so the estimate is about half the injected 10 %
    assert 0.03 < rep.suspects[0].slowdown < 0.13

"""Per-rank step timings of the simulated jobs (what a trainer logs every N steps), with the
effects that are NOT faults (pipeline-stage imbalance, sequence-length variance, GC pauses,
diurnal drift) and the ones that are (stragglers, fail-slows, throttling, slow links)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from minutiae.sim.effects import diurnal, slowdown
from minutiae.sim.plan import Job
from minutiae.sim.truth import TruthEvent

SCHEMA = pa.schema([
    ("step", pa.int64()), ("rank", pa.int32()), ("seconds", pa.float64()), ("node", pa.string()),
    ("gpu", pa.int8()), ("stage", pa.int16()), ("time", pa.float64()),
])


def job_timings(job: Job, gpus: int, events: dict[str, list[TruthEvent]], interval: float,
                jobs_cfg: dict[str, object], rng: np.random.Generator) -> tuple[pa.Table, float]:
    """The job's timing table and its seconds per step (median over logged steps of the slowest
    rank: synchronous training runs at the speed of its slowest rank)."""
    ts = np.arange(job.start + interval, job.end, interval)
    if len(ts) == 0:
        ts = np.array([job.start + (job.end - job.start) / 2.0])
    s_n, r_n = len(ts), len(job.nodes) * gpus
    stages = int(jobs_cfg.get("pipeline_stages", 1))  # type: ignore[call-overload]
    imb = np.asarray(jobs_cfg.get("stage_imbalance", [0.0] * stages), dtype=float)
    rank = np.arange(r_n)
    stage = (rank * stages) // r_n
    slow = np.concatenate([slowdown(events.get(n, []), ts, gpus) for n in job.nodes], axis=1)
    noise = float(jobs_cfg.get("rank_noise", 0.03))  # type: ignore[arg-type]
    cv = float(jobs_cfg.get("seqlen_cv", 0.02))  # type: ignore[arg-type]
    gc_p = float(jobs_cfg.get("gc_pause_prob", 0.0))  # type: ignore[arg-type]
    gc_f = float(jobs_cfg.get("gc_pause_factor", 0.3))  # type: ignore[arg-type]
    amp = float(jobs_cfg.get("diurnal_amplitude", 0.0))  # type: ignore[arg-type]
    common = job.step_s * diurnal(ts, amp) * np.maximum(0.5, 1.0 + cv * rng.standard_normal(s_n))
    per_rank = (1.0 + imb[stage])[None, :] * np.maximum(0.5, 1.0 + noise * rng.standard_normal((s_n, r_n)))
    gc = 1.0 + gc_f * (rng.random((s_n, r_n)) < gc_p)
    secs = common[:, None] * per_rank * (1.0 + slow) * gc
    steps = np.floor((ts - job.start) / job.step_s).astype(np.int64)
    # the node of every row, taken from the job's node names by index (no Python string objects)
    node_of_row = np.tile(np.repeat(np.arange(len(job.nodes), dtype=np.int32), gpus), s_n)
    tab = pa.table({
        "step": pa.array(np.repeat(steps, r_n), pa.int64()),
        "rank": pa.array(np.tile(rank, s_n).astype(np.int32), pa.int32()),
        "seconds": pa.array(secs.ravel().round(5), pa.float64()),
        "node": pa.array(job.nodes, pa.string()).take(pa.array(node_of_row)),
        "gpu": pa.array(np.tile(rank % gpus, s_n).astype(np.int8), pa.int8()),
        "stage": pa.array(np.tile(stage, s_n).astype(np.int16), pa.int16()),
        "time": pa.array(np.repeat(ts, r_n), pa.float64()),
    }, schema=SCHEMA)
    return tab, float(np.median(secs.max(axis=1)))

"""Per-rank step timings of the simulated jobs (what a trainer logs every N steps), with the
effects that are NOT faults (pipeline-stage imbalance, sequence-length variance, GC pauses,
diurnal drift) and the ones that are (stragglers, fail-slows, throttling, slow links).

A share of the jobs (``[jobs] section_share``, chosen by job id) also log section times
(``section`` rows: forward, backward, optimizer, allreduce; the step total has no section), as a
trainer timing its phases does. Their physics: a slow GPU or node (throttling, stragglers,
fail-slows) slows the compute sections; a slow link (IB flaps, symbol errors, a degraded rate)
slows the rank's own transfer in the collective; and every rank of a data-parallel group (a
pipeline stage) enters the all-reduce when its compute is done and waits there for the slowest
compute of its group, so fast ranks *wait* in ``allreduce`` (the model the straggler analysis
inverts: compute = step - collective, own transfer = collective - wait). The step total is
compute + allreduce. Jobs without sections are unchanged (same numbers for the same seed)."""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from minutiae.scoring.truth import TruthEvent
from minutiae.sim.world.effects import NODE_WIDE, PER_GPU, diurnal, slowdown
from minutiae.sim.world.plan import Job

SCHEMA = pa.schema([
    ("step", pa.int64()), ("rank", pa.int32()), ("seconds", pa.float64()), ("node", pa.string()),
    ("gpu", pa.int8()), ("stage", pa.int16()), ("time", pa.float64()), ("section", pa.string()),
])
#: faults that slow a rank's transfers (its NIC rail), not its compute
COMM = frozenset({"ib_link_flap", "ib_symbol_errors", "ib_rate_degraded"})
COMPUTE = (PER_GPU | NODE_WIDE) - COMM
#: compute sections and their shares of a rank's compute (the straggler synth's split)
SECTIONS = (("forward", 0.33), ("backward", 0.6), ("optimizer", 0.07))


def has_sections(job_id: str, share: float) -> bool:
    """Whether a job logs section times: a fixed share of jobs, by job id (no random draw, so
    the other jobs' numbers do not depend on it)."""
    return share > 0 and zlib.crc32(job_id.encode()) / 2**32 < share


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
    per_rank = per_rank * structure(job, gpus, s_n, jobs_cfg)
    gc = 1.0 + gc_f * (rng.random((s_n, r_n)) < gc_p)
    secs = common[:, None] * per_rank * (1.0 + slow) * gc
    steps = np.floor((ts - job.start) / job.step_s).astype(np.int64)
    parts: list[tuple[str | None, np.ndarray]] = [(None, secs)]
    if has_sections(job.job_id, float(jobs_cfg.get("section_share", 0.0))):  # type: ignore[arg-type]
        secs, parts = _sections(job, gpus, events, ts, common, per_rank, gc, stage, stages,
                                float(jobs_cfg.get("comm_fraction", 0.2)), noise)  # type: ignore[arg-type]
    k = len(parts)
    # the node of every row, taken from the job's node names by index (no Python string objects)
    node_of_row = np.tile(np.repeat(np.arange(len(job.nodes), dtype=np.int32), gpus), s_n * k)
    names = pa.array([n for n, _ in parts], pa.string())
    tab = pa.table({
        "step": pa.array(np.tile(np.repeat(steps, r_n), k), pa.int64()),
        "rank": pa.array(np.tile(rank, s_n * k).astype(np.int32), pa.int32()),
        "seconds": pa.array(np.concatenate([v.ravel() for _, v in parts]).round(5), pa.float64()),
        "node": pa.array(job.nodes, pa.string()).take(pa.array(node_of_row)),
        "gpu": pa.array(np.tile(rank % gpus, s_n * k).astype(np.int8), pa.int8()),
        "stage": pa.array(np.tile(stage, s_n * k).astype(np.int16), pa.int16()),
        "time": pa.array(np.tile(np.repeat(ts, r_n), k), pa.float64()),
        "section": names.take(pa.array(np.repeat(np.arange(k, dtype=np.int32), s_n * r_n))),
    }, schema=SCHEMA)
    return tab, float(np.median(secs.max(axis=1)))


def _gpu_seed(node: str, gpu: int) -> int:
    return zlib.crc32(f"{node}/{gpu}".encode())


def structure(job: Job, gpus: int, s_n: int, jobs_cfg: dict[str, object]) -> np.ndarray:
    """(logged steps, ranks) factor of the benign structure real jobs have (issue 13), from its
    own generators so every other number of the simulation stays as it was; ones when the
    profile sets none of it:

    - ``lottery_sd``: a persistent offset per physical GPU (seeded by node and GPU: the same GPU
      is as slow in every job it runs);
    - ``wander_phi``/``wander_sd``: AR(1) per-GPU wander across logged steps (power capping,
      thermals), stationary sd ``wander_sd``;
    - ``node_shared_sd``: per-node noise shared by a node's GPUs at each logged step (TP = 8
      inside a node: its ranks share every micro-batch)."""
    lot = float(jobs_cfg.get("lottery_sd", 0.0))  # type: ignore[arg-type]
    phi = float(jobs_cfg.get("wander_phi", 0.0))  # type: ignore[arg-type]
    wsd = float(jobs_cfg.get("wander_sd", 0.0))  # type: ignore[arg-type]
    nsd = float(jobs_cfg.get("node_shared_sd", 0.0))  # type: ignore[arg-type]
    r_n = len(job.nodes) * gpus
    log = np.zeros((s_n, r_n))
    if not (lot or wsd or nsd):
        return np.ones((s_n, r_n))
    if lot:
        log += np.array([np.random.default_rng(_gpu_seed(n, g)).normal(0.0, lot)
                         for n in job.nodes for g in range(gpus)])[None, :]
    srng = np.random.default_rng(zlib.crc32(("structure:" + job.job_id).encode()))
    if wsd:
        w = np.empty((s_n, r_n))
        w[0] = srng.normal(0.0, wsd, r_n)
        innov = wsd * np.sqrt(max(1.0 - phi * phi, 0.0))
        for t in range(1, s_n):
            w[t] = phi * w[t - 1] + srng.normal(0.0, innov, r_n)
        log += w
    if nsd:
        log += np.repeat(nsd * srng.standard_normal((s_n, len(job.nodes))), gpus, axis=1)
    return np.asarray(np.exp(log))


def _sections(job: Job, gpus: int, events: dict[str, list[TruthEvent]], ts: np.ndarray,
              common: np.ndarray, per_rank: np.ndarray, gc: np.ndarray, stage: np.ndarray,
              stages: int, cf: float, noise: float) -> tuple[np.ndarray, list[tuple[str | None, np.ndarray]]]:
    """Step totals and section times of a job that logs sections (module docstring): compute
    slowed by compute faults, the rank's own transfer by link faults (a link slower by s of a
    step makes the transfer s / cf longer), the wait for the group's slowest compute."""
    s_n, r_n = per_rank.shape
    # its own generator: the main stream (and every other job) stays as it was
    srng = np.random.default_rng(zlib.crc32(job.job_id.encode()))
    slow_c = np.concatenate([slowdown(events.get(n, []), ts, gpus, COMPUTE) for n in job.nodes], axis=1)
    slow_x = np.concatenate([slowdown(events.get(n, []), ts, gpus, COMM) for n in job.nodes], axis=1)
    compute = common[:, None] * per_rank * gc * (1.0 - cf) * (1.0 + slow_c)
    xfer = common[:, None] * cf * np.exp(noise * srng.standard_normal((s_n, r_n))) * (1.0 + slow_x / cf)
    slowest = np.zeros_like(compute)
    for g in range(stages):
        cols = stage == g
        if cols.any():
            slowest[:, cols] = compute[:, cols].max(axis=1, keepdims=True)
    allreduce = (slowest - compute) + xfer
    total = compute + allreduce
    return total, [(None, total), *((name, compute * frac) for name, frac in SECTIONS),
                   ("allreduce", allreduce)]

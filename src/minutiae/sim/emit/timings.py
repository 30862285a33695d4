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
compute + allreduce. Jobs without sections are unchanged (same numbers for the same seed).

The benign structure of real jobs (silicon lottery, wander, per-node shared noise, Student-t
tails, MoE hot experts, restarts onto other nodes, wait-included totals, ring collectives) is
drawn per job in ``sim/world/shape.py`` (the plan writes its truth from the same draws); each
comes from its own generator, so a structure set to 0 in the profile leaves every other number
as it was."""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from minutiae.scoring.truth import TruthEvent
from minutiae.sim.world.effects import NODE_WIDE, PER_GPU, diurnal, slowdown
from minutiae.sim.world.job import Job
from minutiae.sim.world.shape import JobShape, factor, has_sections, job_shape, slots
from minutiae.sim.world.shape import setting as _f

SCHEMA = pa.schema([
    ("step", pa.int64()), ("rank", pa.int32()), ("seconds", pa.float64()), ("node", pa.string()),
    ("gpu", pa.int8()), ("stage", pa.int16()), ("time", pa.float64()), ("section", pa.string()),
])
#: faults that slow a rank's transfers (its NIC rail), not its compute
COMM = frozenset({"ib_link_flap", "ib_symbol_errors", "ib_rate_degraded"})
COMPUTE = (PER_GPU | NODE_WIDE) - COMM
#: compute sections and their shares of a rank's compute (the straggler synth's split)
SECTIONS = (("forward", 0.33), ("backward", 0.6), ("optimizer", 0.07))


__all__ = ["COMM", "COMPUTE", "SCHEMA", "SECTIONS", "has_sections", "job_timings", "structure"]


def _per_slot(job: Job, gpus: int, events: dict[str, list[TruthEvent]], ts: np.ndarray,
              where: np.ndarray, classes: frozenset[str] = COMPUTE | COMM) -> np.ndarray:
    """(logged steps, ranks) slowdown of the faults ``classes`` on the GPU each rank runs on
    (``where``: its GPU slot per step; a restart moves ranks, faults stay with the hardware)."""
    slow = np.concatenate([slowdown(events.get(n, []), ts, gpus, classes) for n in job.nodes],
                          axis=1)
    return np.take_along_axis(slow, where, axis=1)


def _rank_noise(cfg: dict[str, object], job: Job, rng: np.random.Generator,
                shape: tuple[int, int]) -> np.ndarray:
    """Per-rank per-step noise factor: Gaussian with sd ``rank_noise`` from the job's stream, or
    Student-t with ``rank_noise_df`` degrees of freedom (unit variance) from its own."""
    noise = _f(cfg, "rank_noise", 0.03)
    df = _f(cfg, "rank_noise_df", 0.0)
    eps = rng.standard_normal(shape)
    if df > 2:
        trng = np.random.default_rng(zlib.crc32(f"tails:{job.job_id}".encode()))
        eps = trng.standard_t(df, shape) / np.sqrt(df / (df - 2.0))
    return np.maximum(0.5, 1.0 + noise * eps)


def job_timings(job: Job, gpus: int, events: dict[str, list[TruthEvent]], interval: float,
                jobs_cfg: dict[str, object], rng: np.random.Generator) -> tuple[pa.Table, float]:
    """The job's timing table and its seconds per step (median over logged steps of the slowest
    rank: synchronous training runs at the speed of its slowest rank). ``jobs_cfg``: the
    profile's ``[jobs]`` settings, with ``shares`` (the ``fraction_of_jobs`` rates by class)."""
    sections = has_sections(job.job_id, _f(jobs_cfg, "section_share", 0.0))
    shares = jobs_cfg.get("shares", {})
    shape = job_shape(job, gpus, interval, jobs_cfg, shares if isinstance(shares, dict) else {},
                      sections)
    ts = shape.times
    s_n, r_n = len(ts), len(job.nodes) * gpus
    stages = int(_f(jobs_cfg, "pipeline_stages", 1))
    imb = np.asarray(jobs_cfg.get("stage_imbalance", [0.0] * stages), dtype=float)
    rank = np.arange(r_n)
    stage = (rank * stages) // r_n
    where = slots(shape, gpus)
    common = (job.step_s * diurnal(ts, _f(jobs_cfg, "diurnal_amplitude", 0.0))
              * np.maximum(0.5, 1.0 + _f(jobs_cfg, "seqlen_cv", 0.02) * rng.standard_normal(s_n)))
    per_rank = (1.0 + imb[stage])[None, :] * _rank_noise(jobs_cfg, job, rng, (s_n, r_n))
    per_rank = per_rank * factor(job, gpus, shape, jobs_cfg)
    gc = 1.0 + _f(jobs_cfg, "gc_pause_factor", 0.3) * (rng.random((s_n, r_n)) < _f(jobs_cfg, "gc_pause_prob", 0.0))
    comp, comm = (_per_slot(job, gpus, events, ts, where, c) for c in (COMPUTE, COMM))
    if shape.ring:  # every rank of the ring waits for the slow link
        comm = np.broadcast_to(comm.max(axis=1, keepdims=True), comm.shape)
    secs = common[:, None] * per_rank * (1.0 + comp + comm) * gc
    parts: list[tuple[str | None, np.ndarray]] = [(None, secs)]
    if sections:
        secs, parts = _sections(job, common, per_rank, gc, stage, stages, (comp, comm),
                                _f(jobs_cfg, "comm_fraction", 0.2), _f(jobs_cfg, "rank_noise", 0.03))
    elif shape.wait_included:  # the step's wall time: every rank waited for the slowest
        wrng = np.random.default_rng(zlib.crc32(f"wait:{job.job_id}".encode()))
        secs = secs.max(axis=1, keepdims=True) * np.exp(WAIT_JITTER * wrng.standard_normal(secs.shape))
        parts = [(None, secs)]
    return _table(job, gpus, shape, stage, where, parts), float(np.median(secs.max(axis=1)))


#: per-rank jitter of wait-included step totals (the ranks leave the step's last collective
#: within a fraction of a millisecond of each other; assumption)
WAIT_JITTER = 0.0003


def _steps(job: Job, shape: JobShape) -> tuple[np.ndarray, np.ndarray]:
    """The logged rows kept (a restart loses ``gap`` logged steps) and their step numbers (a
    restart with ``steps_reset`` counts again from 0)."""
    ts = shape.times
    steps = np.floor((ts - job.start) / job.step_s).astype(np.int64)
    keep = np.ones(len(ts), dtype=bool)
    if shape.restart is not None:
        keep[shape.restart:shape.restart + shape.gap] = False
        resume = shape.restart + shape.gap
        if shape.steps_reset and resume < len(ts):
            steps[resume:] = np.floor((ts[resume:] - ts[resume]) / job.step_s).astype(np.int64)
    return keep, steps


def _table(job: Job, gpus: int, shape: JobShape, stage: np.ndarray, where: np.ndarray,
           parts: list[tuple[str | None, np.ndarray]]) -> pa.Table:
    keep, steps = _steps(job, shape)
    ts, where = shape.times[keep], where[keep]
    s_n, r_n = len(ts), where.shape[1]
    k = len(parts)
    rank = np.arange(r_n)
    # the node of every row, taken from the job's node names by index (no Python string objects)
    node_of_row = np.tile((where // gpus).astype(np.int32).ravel(), k)
    names = pa.array([n for n, _ in parts], pa.string())
    return pa.table({
        "step": pa.array(np.tile(np.repeat(steps[keep], r_n), k), pa.int64()),
        "rank": pa.array(np.tile(rank, s_n * k).astype(np.int32), pa.int32()),
        "seconds": pa.array(np.concatenate([v[keep].ravel() for _, v in parts]).round(5),
                            pa.float64()),
        "node": pa.array(job.nodes, pa.string()).take(pa.array(node_of_row)),
        "gpu": pa.array(np.tile(rank % gpus, s_n * k).astype(np.int8), pa.int8()),
        "stage": pa.array(np.tile(stage, s_n * k).astype(np.int16), pa.int16()),
        "time": pa.array(np.tile(np.repeat(ts, r_n), k), pa.float64()),
        "section": names.take(pa.array(np.repeat(np.arange(k, dtype=np.int32), s_n * r_n))),
    }, schema=SCHEMA)


def structure(job: Job, gpus: int, s_n: int, jobs_cfg: dict[str, object]) -> np.ndarray:
    """(logged steps, ranks) factor of the per-GPU and per-node structure (lottery, wander,
    node-shared noise: ``shape.factor``) of a job logging ``s_n`` steps, without restarts or
    hot experts; ones when the profile sets none of it."""
    times = np.arange(s_n, dtype=np.float64)
    shape = JobShape(times, None, 0, tuple(range(len(job.nodes))), False, False, False, ())
    return factor(job, gpus, shape, jobs_cfg)


def _sections(job: Job, common: np.ndarray, per_rank: np.ndarray, gc: np.ndarray,
              stage: np.ndarray, stages: int, slow: tuple[np.ndarray, np.ndarray], cf: float,
              noise: float) -> tuple[np.ndarray, list[tuple[str | None, np.ndarray]]]:
    """Step totals and section times of a job that logs sections (module docstring): compute
    slowed by compute faults, the rank's own transfer by link faults (a link slower by s of a
    step makes the transfer s / cf longer; in a ring job every rank's), the wait for the
    group's slowest compute."""
    s_n, r_n = per_rank.shape
    slow_c, slow_x = slow
    # its own generator: the main stream (and every other job) stays as it was
    srng = np.random.default_rng(zlib.crc32(job.job_id.encode()))
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

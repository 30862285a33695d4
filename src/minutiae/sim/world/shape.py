"""The benign structure of each simulated job's step timings (issue 13): what real jobs have
that is not a fault, drawn per job so that the plan (its truth) and the timings emitter (its
rows) see the same thing.

- **silicon lottery**: a persistent offset per physical GPU (the same GPU in every job);
- **wander**: AR(1) per-GPU wander across logged steps (power capping, thermals);
- **per-node shared noise**: a node's GPUs share each micro-batch's noise (TP = 8 in a node);
- **Student-t per-rank noise** (``rank_noise_df``): one-step outliers heavier than Gaussian;
- **MoE hot experts**: in jobs of ``moe_signatures``, one rank of every expert-parallel group
  (``moe_ep`` ranks) is ``moe_hot_size`` slower for ``moe_hot_steps`` training steps (at
  least the logged step it falls on), then the heat moves to another rank of the group;
- **restarts** (class ``job_restart``, a share of jobs): the job stops for ``restart_minutes``
  and resumes from a checkpoint with its ranks on other nodes of its allocation (the node slots
  permuted), step numbers starting again at 0 in half of them;
- **wait-included totals** (``wait_included_totals``, a share of the jobs without sections):
  every rank logs the step's wall time, which includes the wait for the slowest rank;
- **ring collectives** (``ring_collective``, a share of jobs): a slow link slows the all-reduce
  of every rank of the ring, not only its own transfer.

Each draw comes from its own generator seeded by the job id (and a name), so turning one
structure on or off changes no other number of the simulation. Sizes and shares are profile
settings with their sources (``profiles/default.toml``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from minutiae.scoring.truth import TruthEvent
from minutiae.sim.world.job import Job
from minutiae.sim.world.profile import Profile

#: benign classes whose truth is made here (``plan`` makes the others)
SHAPE_CLASSES = frozenset({"gpu_lottery", "gpu_wander", "node_shared_noise", "rank_noise_tails",
                           "moe_hot_expert", "job_restart", "wait_included_totals",
                           "ring_collective"})
#: a lottery offset (a wander excursion) of this many sds or more is listed in the truth (a
#: 3 % alarm floor is ~3 sds of the default sizes: what could pass for a straggler; a wander
#: comes back, so only its rarer excursions)
TRUTH_SDS, WANDER_SDS = 3.0, 3.5
#: hot-expert spells of at least this many logged steps are listed on their GPU (shorter ones
#: are per-step noise at the logging cadence: one event for the job)
HOT_LISTED = 3
#: logged steps after a restart that the restart's truth covers (the analysis' warm-up + 5)
RESTART_STEPS = 25


@dataclass(frozen=True, slots=True)
class HotSpell:
    """A hot expert: ``rank`` is ``size`` slower from logged step ``first`` to ``last``
    (exclusive)."""

    rank: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class JobShape:
    """One job's draws. ``restart``: the logged-step index at which the job resumes after its
    restart (None: no restart), ``gap`` the logged steps lost to it; ``order[k]``: the node slot
    whose node the ranks of slot ``k`` run on after it."""

    times: np.ndarray
    restart: int | None
    gap: int
    order: tuple[int, ...]
    steps_reset: bool
    wait_included: bool
    ring: bool
    hot: tuple[HotSpell, ...]


def logged_times(job: Job, interval: float) -> np.ndarray:
    """The times a job logs a step (one every ``interval`` seconds; at least one)."""
    ts = np.arange(job.start + interval, job.end, interval)
    return ts if len(ts) else np.array([job.start + (job.end - job.start) / 2.0])


def _rng(job_id: str, what: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(f"{what}:{job_id}".encode()))


def has_sections(job_id: str, share: float) -> bool:
    """Whether a job logs section times: a fixed share of jobs, by job id (no random draw, so
    the other jobs' numbers do not depend on it)."""
    return share > 0 and zlib.crc32(job_id.encode()) / 2**32 < share


def _share(job_id: str, what: str, p: float) -> bool:
    """Whether a job is in a share ``p`` of the jobs: by its id, from the structure's own
    generator (CRC-32 itself is not uniform over sequential ids: 25.5 % of 3,000 ids fell
    under 0.3)."""
    return p > 0 and float(_rng(job_id, what).random()) < p


def setting(cfg: dict[str, object], key: str, default: float = 0.0) -> float:
    """A numeric ``[jobs]`` setting of the profile (``default`` when it is not set)."""
    return float(cfg.get(key, default))  # type: ignore[arg-type]


_f = setting


def _hot(job: Job, gpus: int, n: int, interval: float,
         cfg: dict[str, object]) -> tuple[HotSpell, ...]:
    """Hot-expert spells of an MoE job: per expert-parallel group, one rank at a time for
    ``moe_hot_steps`` training steps (at least one logged step: a spell shorter than the
    logging interval shows on the logged step it falls on), then another rank of the group."""
    sigs = cfg.get("moe_signatures", [])
    ep = int(_f(cfg, "moe_ep", 8))
    if job.signature not in (sigs if isinstance(sigs, list) else []) or ep < 2 \
            or _f(cfg, "moe_hot_size") <= 0:
        return ()
    lo, hi = (int(v) for v in cfg.get("moe_hot_steps", [10, 40]))  # type: ignore[attr-defined]
    per_logged = interval / job.step_s  # training steps between two logged steps
    rng = _rng(job.job_id, "moe")
    out = []
    for g in range(len(job.nodes) * gpus // ep):
        t, hot = 0, -1
        while t < n:
            span = max(1, int(round(int(rng.integers(lo, hi + 1)) / per_logged)))
            hot = (hot + 1 + int(rng.integers(ep - 1))) % ep if hot >= 0 else int(rng.integers(ep))
            out.append(HotSpell(g * ep + hot, t, min(n, t + span)))
            t += span
    return tuple(out)


def job_shape(job: Job, gpus: int, interval: float, cfg: dict[str, object],
              shares: dict[str, float], sections: bool) -> JobShape:
    """The job's draws (module docstring); ``shares``: the ``fraction_of_jobs`` rates of the
    profile by class; ``sections``: whether the job logs section times."""
    ts = logged_times(job, interval)
    n = len(ts)
    restart, gap, order, reset = None, 0, tuple(range(len(job.nodes))), False
    if _share(job.job_id, "job_restart", shares.get("job_restart", 0.0)) and n >= 8:
        rng = _rng(job.job_id, "restart")
        restart = int(rng.integers(n // 4, max(n // 4 + 1, 3 * n // 4)))
        gap = int(np.ceil(_f(cfg, "restart_minutes", 10.0) * 60.0 / interval))
        order = tuple(int(i) for i in rng.permutation(len(job.nodes)))
        reset = bool(rng.random() < 0.5)
    wait = not sections and _share(job.job_id, "wait_included_totals",
                                   shares.get("wait_included_totals", 0.0))
    ring = _share(job.job_id, "ring_collective", shares.get("ring_collective", 0.0))
    return JobShape(ts, restart, gap, order, reset, wait, ring, _hot(job, gpus, n, interval, cfg))


def _gpu_seed(node: str, gpu: int) -> int:
    return zlib.crc32(f"{node}/{gpu}".encode())


def lottery(nodes: tuple[str, ...], gpus: int, sd: float) -> np.ndarray:
    """The persistent log offset of every GPU of ``nodes`` (seeded by node and GPU)."""
    if sd <= 0:
        return np.zeros(len(nodes) * gpus)
    return np.array([np.random.default_rng(_gpu_seed(n, g)).normal(0.0, sd)
                     for n in nodes for g in range(gpus)])


def wander(job: Job, ranks: int, n: int, cfg: dict[str, object]) -> np.ndarray:
    """(logged steps, GPU slots) AR(1) log wander of the job's GPUs, stationary sd
    ``wander_sd``, coefficient ``wander_phi`` per logged step."""
    sd, phi = _f(cfg, "wander_sd"), _f(cfg, "wander_phi")
    if sd <= 0:
        return np.zeros((n, ranks))
    rng = _rng(job.job_id, "wander")
    w = np.empty((n, ranks))
    w[0] = rng.normal(0.0, sd, ranks)
    innov = sd * np.sqrt(max(1.0 - phi * phi, 0.0))
    for t in range(1, n):
        w[t] = phi * w[t - 1] + rng.normal(0.0, innov, ranks)
    return w


def slots(shape: JobShape, gpus: int) -> np.ndarray:
    """(logged steps, ranks): the GPU slot (node slot x gpus + GPU) each rank runs on."""
    n, nodes = len(shape.times), len(shape.order)
    rank = np.arange(nodes * gpus)
    out = np.broadcast_to(rank, (n, rank.size)).copy()
    if shape.restart is not None:
        moved = np.asarray(shape.order)[rank // gpus] * gpus + rank % gpus
        out[shape.restart:] = moved
    return out


def factor(job: Job, gpus: int, shape: JobShape, cfg: dict[str, object]) -> np.ndarray:
    """(logged steps, ranks) multiplicative factor of the structure on each rank's compute:
    its GPU's lottery and wander (the GPU it runs on: a restart moves ranks), its node's shared
    noise, and its hot-expert spells."""
    n, r_n = len(shape.times), len(job.nodes) * gpus
    gpu_log = lottery(job.nodes, gpus, _f(cfg, "lottery_sd"))[None, :] + wander(job, r_n, n, cfg)
    nsd = _f(cfg, "node_shared_sd")
    if nsd > 0:
        noise = nsd * _rng(job.job_id, "node").standard_normal((n, len(job.nodes)))
        gpu_log = gpu_log + np.repeat(noise, gpus, axis=1)
    log = np.take_along_axis(gpu_log, slots(shape, gpus), axis=1)
    size = np.log1p(_f(cfg, "moe_hot_size"))
    for s in shape.hot:
        log[s.first:s.last, s.rank] += size
    return np.asarray(np.exp(log))


def shares(profile: Profile) -> dict[str, float]:
    """The profile's ``fraction_of_jobs`` rates by class (the shares of jobs with a structure)."""
    return {f.cls: f.rate for f in profile.faults if f.unit == "fraction_of_jobs"}


def jobs_config(profile: Profile) -> dict[str, object]:
    """The ``[jobs]`` settings the timings emitter reads, with the shares."""
    return {**profile.jobs, "shares": shares(profile)}


def _event(cls: str, sig: tuple[str, ...], node: str | None, component: str | None,
           start: float, end: float, **details: object) -> TruthEvent:
    return TruthEvent("", cls, node, component, start, end, "info", False, sig, False, details)


def _episodes(on: np.ndarray) -> list[tuple[int, int]]:
    """(first, last exclusive) of every run of True in ``on``."""
    d = np.diff(np.concatenate([[0], on.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist(), strict=True))


def _gpu_truth(job: Job, gpus: int, shape: JobShape, cfg: dict[str, object],
               sig: dict[str, tuple[str, ...]]) -> list[TruthEvent]:
    """Lottery offsets of at least ``TRUTH_SDS`` sds and wander excursions of ``WANDER_SDS``
    (slow side), each on its GPU; an MoE job's hot experts, and its spells of ``HOT_LISTED``
    logged steps or more on the GPU the hot rank ran on."""
    out: list[TruthEvent] = []
    ts, step = shape.times, float(shape.times[1] - shape.times[0]) if len(shape.times) > 1 else 0.0
    lsd, wsd = _f(cfg, "lottery_sd"), _f(cfg, "wander_sd")
    if "gpu_lottery" in sig and lsd > 0:
        offsets = lottery(job.nodes, gpus, lsd)
        for k in np.flatnonzero(offsets >= TRUTH_SDS * lsd).tolist():
            # the log offset, so the scorecard can tell a slow GPU beyond the floor (score.py)
            out.append(_event("gpu_lottery", sig["gpu_lottery"], job.nodes[k // gpus],
                              f"gpu:{k % gpus}", job.start, job.end, job_id=job.job_id,
                              gpu=k % gpus, offset=round(float(offsets[k]), 5)))
    if "gpu_wander" in sig and wsd > 0:
        w = wander(job, len(job.nodes) * gpus, len(ts), cfg)
        for k in np.flatnonzero((w >= WANDER_SDS * wsd).any(axis=0)).tolist():
            for a, b in _episodes(w[:, k] >= WANDER_SDS * wsd):
                out.append(_event("gpu_wander", sig["gpu_wander"], job.nodes[k // gpus],
                                  f"gpu:{k % gpus}", float(ts[a]) - step, float(ts[b - 1]),
                                  job_id=job.job_id, gpu=k % gpus,
                                  peak=round(float(w[a:b, k].max()), 4)))
    if "moe_hot_expert" in sig and shape.hot:
        out.append(_event("moe_hot_expert", sig["moe_hot_expert"], None, f"job:{job.job_id}",
                          job.start, job.end, job_id=job.job_id, nodes=list(job.nodes)))
        where = slots(shape, gpus)
        for spell in (h for h in shape.hot if h.last - h.first >= HOT_LISTED):
            k = int(where[spell.first, spell.rank])
            out.append(_event("moe_hot_expert", sig["moe_hot_expert"], job.nodes[k // gpus],
                              f"gpu:{k % gpus}", float(ts[spell.first]) - step,
                              float(ts[spell.last - 1]), job_id=job.job_id, rank=spell.rank))
    return out


def shape_truth(profile: Profile, jobs: list[Job], gpus: int) -> list[TruthEvent]:
    """The must-not-alarm truth of every job's timing structure (``SHAPE_CLASSES`` with a
    rate in the profile): where a GPU's lottery or wander could pass for a straggler, each hot
    expert's spell, each restart (its first ``RESTART_STEPS`` logged steps), the jobs logging
    wait-included totals or running ring collectives, and the per-job noise structures."""
    cfg = jobs_config(profile)
    sig = {f.cls: f.signature for f in profile.faults if f.cls in SHAPE_CLASSES and f.rate > 0}
    interval = float(profile.sampling["timing_interval_s"])
    share = shares(profile)
    out: list[TruthEvent] = []
    for j in jobs:
        shape = job_shape(j, gpus, interval, cfg, share,
                          has_sections(j.job_id, _f(cfg, "section_share")))
        nodes = list(j.nodes)
        for cls, on in (("node_shared_noise", _f(cfg, "node_shared_sd") > 0),
                        ("rank_noise_tails", _f(cfg, "rank_noise_df") > 2),
                        ("wait_included_totals", shape.wait_included),
                        ("ring_collective", shape.ring)):
            if on and cls in sig:
                out.append(_event(cls, sig[cls], None, f"job:{j.job_id}", j.start, j.end,
                                  job_id=j.job_id, nodes=nodes))
        if shape.restart is not None and "job_restart" in sig:
            t0 = float(shape.times[shape.restart])
            out.append(_event("job_restart", sig["job_restart"], None, f"job:{j.job_id}", t0,
                              t0 + (shape.gap + RESTART_STEPS) * interval, job_id=j.job_id,
                              nodes=nodes, steps_reset=shape.steps_reset))
        out += _gpu_truth(j, gpus, shape, cfg, sig)
    return out

"""An independent GPU-telemetry fleet for slownodes (NOT the simulator's code path): its own
physics and its own faults, with the ground truth, to check what slownodes finds and misses.

Default: 64 nodes x 8 GPUs x 2 days sampled every 5 min (295k rows). 48 H100 nodes and 16 A100
nodes, 8 racks of 8; the inlet air follows the day (+-3 C) and rack ``r2`` runs 6 C hotter;
jobs of three types (train ~98 % utilisation, finetune ~85 %, infer ~55 %) of 1-16 nodes,
some under a 500 W (H100) / 300 W (A100) power cap (``power_limit_w``; the clock drops and the
SW power-cap reason is set); every GPU has a fixed clock offset within +-1 % and a thermal
resistance within +-4 %.

``Physics`` adds what a real fleet has and a clean model lacks, none of it known to slownodes:
each job its own power intensity (a GEMM-heavy job draws more at the same utilisation than a
memory-bound one, and the heaviest hit the TDP: power-capped, clock down, at the default
limit), rear-row GPUs breathing pre-heated air (a fixed offset per slot), nodes higher in the
rack a little warmer, fans that flatten the temperature rise at high power, utilisation dips
(input pipeline, checkpoints), time stamps that jitter by node and sample, and lost scrapes.
``CLEAN`` switches it all off (the model the analysis was first built against).

Faults (``Fault``): ``thermal`` (the GPU runs 15 C hotter at the same power), ``power`` (20 %
less power at full utilisation and clock), ``clock`` (SM clock -12 % with HW slowdown),
``node`` (a whole node -8 % clock, no reason, in a 1-node job), ``gap`` (no samples from a node
or one GPU for a window) and ``absent`` (a node of fleet.csv that never reports). A fault can
outlive a job change (two episodes of one fault window are still one fault).
``default_faults`` places them at fixed nodes and times; ``random_faults`` draws nodes, GPUs,
starts and lengths from a seed (for seeds never used while developing the analysis).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SKUS = {"H100-SXM5": dict(clock=1980.0, tdp=700.0, idle=90.0, r=0.055, cap=500.0),
        "A100-SXM4": dict(clock=1410.0, tdp=400.0, idle=60.0, r=0.10, cap=300.0)}
TYPES = {"train": 0.98, "finetune": 0.85, "infer": 0.55}
IDLE_REASON, SW_POWER_CAP, HW_SLOWDOWN = 0x1, 0x4, 0x8


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str          # thermal | power | clock | node | gap | absent
    node: str
    gpu: int | None    # None: the whole node
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Physics:
    """What a real fleet adds to the clean model (see the module docstring)."""

    intensity: tuple[float, float] = (0.6, 1.15)  # a job's dynamic power x (TDP - idle) at 100 %
    slot_c: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 4.0, 4.5, 5.0, 5.5)  # rear row pre-heated
    rack_gradient_c: float = 0.3   # C per position up the rack
    fan_bend: float = 0.2          # temperature rise x (1 - bend x power / TDP)
    dips: float = 0.08             # share of busy samples whose utilisation dips to 20-60 %
    jitter_s: float = 8.0          # time-stamp jitter per node and sample (+-)
    lost: float = 0.003            # share of a node's samples lost (failed scrapes)
    coupled: bool = True           # a clock fault is a ceiling: the GPU draws less power at it,
                                   # and under a power cap that binds lower it changes nothing


CLEAN = Physics(intensity=(1.0, 1.0), slot_c=(0.0,) * 8, rack_gradient_c=0.0, fan_bend=0.0,
                dips=0.0, jitter_s=0.0, lost=0.0, coupled=False)


@dataclass(frozen=True, slots=True)
class Fleet:
    telemetry: pl.DataFrame
    fleet: pl.DataFrame
    jobs: pl.DataFrame
    faults: tuple[Fault, ...]
    interval: float
    effect: tuple[int, ...] = ()  # per fault: its longest visible run, in samples (``observable``)


def _nodes(n: int) -> tuple[list[str], list[str], list[str]]:
    names = [f"gn{i:03d}" for i in range(n)]
    skus = ["A100-SXM4" if i >= n * 3 // 4 else "H100-SXM5" for i in range(n)]
    racks = [f"r{i // 8}" for i in range(n)]
    return names, skus, racks


def _schedule(rng: np.random.Generator, names: list[str], skus: list[str], span: float,
              solo: dict[str, float]) -> list[dict[str, object]]:
    """Back-to-back jobs per group of nodes of one SKU (groups re-drawn per job), with idle gaps;
    ``solo`` nodes run one 1-node job from the given start."""
    jobs: list[dict[str, object]] = []
    free = {n: 0.0 for n in names}
    jid = 0
    while True:
        cands = sorted(free, key=lambda n: (free[n], n))
        first = cands[0]
        if free[first] >= span:
            break
        sku = skus[names.index(first)]
        size = int(rng.choice([1, 2, 4, 8, 16], p=[0.2, 0.2, 0.25, 0.2, 0.15]))
        pool = ([first] if first in solo else
                [n for n in cands if skus[names.index(n)] == sku and n not in solo][:size])
        start = max(free[n] for n in pool) + float(rng.uniform(0, 1800))
        dur = float(rng.uniform(2, 12)) * 3600
        jtype = str(rng.choice(list(TYPES)))
        capped = bool(rng.random() < 0.25)
        jobs.append(dict(job_id=str(jid), nodes=" ".join(pool), start=T0 + start, end=T0 + start + dur,
                         job_type=jtype, capped=capped))
        jid += 1
        for n in pool:
            free[n] = start + dur if n not in solo or start + dur < solo[n] else span
    for n, at in solo.items():
        jobs = [j for j in jobs if n not in str(j["nodes"]).split() or float(j["end"]) <= T0 + at]  # type: ignore[arg-type]
        jobs.append(dict(job_id=str(jid), nodes=n, start=T0 + at, end=T0 + span, job_type="train",
                         capped=False))
        jid += 1
    return jobs


def default_faults(names: list[str], span: float) -> tuple[Fault, ...]:
    h = 3600.0
    f = [Fault("thermal", names[5], 2, T0 + 6 * h, T0 + 14 * h),
         Fault("thermal", names[21], 6, T0 + 20 * h, T0 + 40 * h),   # outlives job changes
         Fault("thermal", names[55], 1, T0 + 30 * h, T0 + 36 * h),   # A100
         Fault("power", names[9], 4, T0 + 3 * h, T0 + 9 * h),
         Fault("power", names[30], 0, T0 + 25 * h, T0 + 31 * h),
         Fault("power", names[50], 7, T0 + 10 * h, T0 + 16 * h),     # A100
         Fault("clock", names[12], 3, T0 + 8 * h, T0 + 26 * h),      # outlives job changes
         Fault("clock", names[40], 5, T0 + 33 * h, T0 + 37 * h),
         Fault("clock", names[60], 2, T0 + 4 * h, T0 + 8 * h),       # A100
         Fault("node", names[17], None, T0 + 12 * h, T0 + 20 * h),   # in a 1-node job
         Fault("gap", names[33], None, T0 + 14 * h, T0 + 22 * h),    # 8 h without telemetry
         Fault("gap", names[44], 3, T0 + 5 * h, T0 + 8 * h),         # one GPU silent 3 h
         Fault("absent", names[-1], None, T0, T0 + span)]
    return tuple(f)


def random_faults(seed: int, names: list[str], skus: list[str], span: float) -> tuple[Fault, ...]:
    """Three thermal, three power and three clock faults on distinct random GPUs (at least one
    of each on the second SKU), 4-20 h long at random starts; a slow node in a 1-node job; an
    8-h node gap, a 3-h GPU gap and an absent node: drawn from ``seed`` alone."""
    rng = np.random.default_rng([seed, 1818])
    h = 3600.0
    order = list(rng.permutation(len(names)))
    other = [i for i in order if skus[i] != skus[0]]
    picks = [other[0], *[i for i in order if i != other[0]]][:14]
    rng.shuffle(picks[:9])
    out = []
    for k, kind in enumerate(["thermal", "power", "clock"] * 3):
        start = float(rng.uniform(2 * h, span - 12 * h))
        out.append(Fault(kind, names[picks[k]], int(rng.integers(8)), T0 + start,
                         T0 + min(span, start + float(rng.uniform(4, 20)) * h)))
    node_at = float(rng.uniform(4 * h, span - 12 * h))
    gap_at = float(rng.uniform(2 * h, span - 10 * h))
    out += [Fault("node", names[picks[9]], None, T0 + node_at, T0 + node_at + float(rng.uniform(6, 10)) * h),
            Fault("gap", names[picks[10]], None, T0 + gap_at, T0 + gap_at + 8 * h),
            Fault("gap", names[picks[11]], int(rng.integers(8)), T0 + gap_at + h, T0 + gap_at + 4 * h),
            Fault("absent", names[picks[12]], None, T0, T0 + span)]
    return tuple(out)


def _job_arrays(jobs: list[dict[str, object]], names: list[str], times: np.ndarray,
                intensity: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (time, node): job type index (-1 idle), whether capped, the job's power intensity."""
    jt = np.full((times.size, len(names)), -1, dtype=np.int64)
    cap = np.zeros((times.size, len(names)), dtype=bool)
    inten = np.ones((times.size, len(names)))
    kinds = list(TYPES)
    for j, k_j in zip(jobs, intensity, strict=True):
        on = (times >= float(j["start"])) & (times < float(j["end"]))  # type: ignore[arg-type]
        for n in str(j["nodes"]).split():
            k = names.index(n)
            jt[on, k] = kinds.index(str(j["job_type"]))
            cap[on, k] = bool(j["capped"])
            inten[on, k] = k_j
    return jt, cap, inten


def make_fleet(nodes: int = 64, days: float = 2.0, interval: float = 300.0, seed: int = 7,
               faults: tuple[Fault, ...] | None = None, physics: Physics = CLEAN) -> Fleet:
    """The fleet, its jobs and its telemetry. ``physics`` draws from its own random stream, so
    ``CLEAN`` gives the same rows for a seed as before ``Physics`` existed."""
    rng = np.random.default_rng(seed)
    prng = np.random.default_rng([seed, 18])
    names, skus, racks = _nodes(nodes)
    span = days * 86400
    faults = default_faults(names, span) if faults is None else faults
    solo = {f.node: f.start - T0 - 2 * 3600 for f in faults if f.kind == "node"}
    jobs = _schedule(rng, names, skus, span, solo)
    times = T0 + interval * np.arange(int(span // interval))
    jt, cap, inten = _job_arrays(jobs, names, times, prng.uniform(*physics.intensity, len(jobs)))
    inlet = 22 + 3 * np.sin(2 * np.pi * (times - T0) / 86400 - np.pi / 2)
    parts, effect = [], {f: times.size for f in faults}
    for k, node in enumerate(names):
        if any(f.kind == "absent" and f.node == node for f in faults):
            continue
        where = _Where(node, SKUS[skus[k]], racks[k], k % 8)
        mine = [f for f in faults if f.node == node]
        rows, seen = _node_rows(rng, prng, physics, where, times, inlet,
                                (jt[:, k], cap[:, k], inten[:, k]), mine)
        parts.append(rows)
        effect.update(zip(mine, seen, strict=True))
    tel = pl.concat(parts).sort("time", "node", "gpu")
    fleet = pl.DataFrame({"node": names, "sku": skus, "rack": racks})
    jobs_df = pl.DataFrame({"job_id": [j["job_id"] for j in jobs], "start": [str(j["start"]) for j in jobs],
                            "end": [str(j["end"]) for j in jobs], "nodes": [j["nodes"] for j in jobs],
                            "job_type": [j["job_type"] for j in jobs]})
    return Fleet(tel, fleet, jobs_df, faults, interval, tuple(effect[f] for f in faults))


@dataclass(frozen=True, slots=True)
class _Where:
    node: str
    sku: dict[str, float]
    rack: str
    pos: int  # position in the rack, bottom up


_CEILING = {"clock": 1 / 1.12, "node": 0.92}


def _window(f: Fault, times: np.ndarray) -> tuple[np.ndarray, slice | int]:
    return (times >= f.start) & (times < f.end), slice(None) if f.gpu is None else f.gpu


def _ceilings(times: np.ndarray, busy: np.ndarray, faults: list[Fault]) -> tuple[np.ndarray, np.ndarray]:
    """Per sample the clock ceiling the clock/node faults set (1: none) and the HW-slowdown
    reason a clock fault raises."""
    ceil = np.ones((times.size, 8))
    hw = np.zeros((times.size, 8), dtype=np.int64)
    for f in faults:
        if f.kind in _CEILING:
            w, g = _window(f, times)
            ceil[w, g] *= np.where(busy[w], _CEILING[f.kind], 1.0)[:, None] if f.gpu is None \
                else np.where(busy[w], _CEILING[f.kind], 1.0)
            if f.kind == "clock":
                hw[w, g] |= np.where(busy[w], HW_SLOWDOWN, 0)
    return ceil, hw


def _other_faults(times: np.ndarray, util: np.ndarray, power: np.ndarray, faults: list[Fault]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Thermal, power and gap faults (power in place); returns (extra temperature, kept)."""
    keep = np.ones(power.shape, dtype=bool)
    extra_t = np.zeros(power.shape)
    for f in faults:
        w, g = _window(f, times)
        if f.kind == "thermal":
            extra_t[w, g] += 15.0
        elif f.kind == "power":
            power[w, g] *= np.where(util[w, g] > 50, 0.8, 1.0)
        elif f.kind == "gap":
            keep[w, g] = False
    return extra_t, keep


def _clock_power(sku: dict[str, float], boost: np.ndarray, dyn: np.ndarray, limit: np.ndarray,
                 ceil: np.ndarray, coupled: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(clock, power, capped) from the boost clock, the load's dynamic power at it, the power
    limit and the fault ceilings. Coupled: the clock is the lower of the ceiling and what the
    power cap allows (a healthy GPU's capped clock), the power follows the clock. Not coupled
    (``CLEAN``): the cap first, the ceiling on top, the power as without the fault."""
    demand = sku["idle"] + dyn
    capped_clock = np.where(demand > limit, boost * (limit / demand) ** 0.5, boost)
    if coupled:
        clock = np.minimum(boost * ceil, capped_clock)
        capped = capped_clock < boost * ceil
        power = np.where(capped, limit, sku["idle"] + dyn * ceil)
    else:
        clock, capped, power = capped_clock * ceil, demand > limit, demand
    return clock, power, capped


def _node_rows(rng: np.random.Generator, prng: np.random.Generator, ph: Physics, at: _Where,
               times: np.ndarray, inlet: np.ndarray, job: tuple[np.ndarray, np.ndarray, np.ndarray],
               faults: list[Fault]) -> tuple[pl.DataFrame, list[int]]:
    jt, capped_job, inten = job
    sku = at.sku
    n_t, n_g = times.size, 8
    busy = jt >= 0
    util = np.where(busy, np.array(list(TYPES.values()))[np.maximum(jt, 0)], 0.0)[:, None]
    util = np.clip(util * 100 + rng.normal(0, 1.5, (n_t, n_g)) * busy[:, None], 0, 100)
    dip = busy[:, None] & (prng.random((n_t, n_g)) < ph.dips)
    util = np.where(dip, util * prng.uniform(0.2, 0.6, (n_t, n_g)), util)
    spread = rng.uniform(0.99, 1.01, n_g)
    boost = np.where(busy[:, None], sku["clock"] * spread * (1 + rng.normal(0, 0.003, (n_t, n_g))), 210.0)
    dyn = (sku["tdp"] - sku["idle"]) * inten[:, None] * (util / 100) ** 1.3 * rng.normal(1, 0.02, (n_t, n_g))
    limit = np.where(capped_job, sku["cap"], sku["tdp"])[:, None] * np.ones(n_g)
    ceil, hw = _ceilings(times, busy, faults)
    clock, power, over = _clock_power(sku, boost, dyn, limit, ceil, ph.coupled)
    power = np.minimum(power, limit * rng.normal(0.995, 0.004, (n_t, n_g)))
    reasons = np.where(busy[:, None], np.where(over, SW_POWER_CAP, 0) | hw, IDLE_REASON).astype(np.int64)
    healthy = np.minimum(boost, np.where(sku["idle"] + dyn > limit,
                                         boost * (limit / (sku["idle"] + dyn)) ** 0.5, boost))
    extra_t, keep = _other_faults(times, util, power, faults)
    r = sku["r"] * rng.uniform(0.96, 1.04, n_g)
    hot = (6.0 if at.rack == "r2" else 0.0) + ph.rack_gradient_c * at.pos
    rise = r * power * (1 - ph.fan_bend * power / sku["tdp"])
    temp = (inlet[:, None] + hot + 8 + rise + np.asarray(ph.slot_c) + extra_t
            + rng.normal(0, 0.7, (n_t, n_g)))
    keep &= (prng.random(n_t) >= ph.lost)[:, None]
    # a clock fault shows where it holds the clock at least half its size below the healthy one
    effect = [_effect(f, times, keep, busy, util, clock < healthy * (1 - (1 - _CEILING.get(f.kind, 1)) / 2))
              for f in faults]
    stamp = times + (prng.uniform(-ph.jitter_s, ph.jitter_s, n_t) if ph.jitter_s else 0.0)
    tt, gg = np.meshgrid(stamp, np.arange(n_g), indexing="ij")
    m = keep.ravel()
    return pl.DataFrame({
        "time": tt.ravel()[m].round(3), "node": at.node, "gpu": gg.ravel()[m].astype(np.int64),
        "sm_clock_mhz": clock.ravel()[m].round(), "power_w": power.ravel()[m].round(1),
        "temp_c": temp.ravel()[m].round(), "util": util.ravel()[m].round(),
        "power_limit_w": limit.ravel()[m], "clock_event_reasons": reasons.ravel()[m],
        "pcie_replay": np.zeros(int(m.sum()), dtype=np.int64)}), effect


def _effect(f: Fault, times: np.ndarray, keep: np.ndarray, busy: np.ndarray, util: np.ndarray,
            slowed: np.ndarray) -> int:
    """The longest run of consecutive sample times at which the fault shows in the telemetry:
    thermal while busy, power at more than 50 % utilisation, a clock ceiling where it held the
    clock at least half the fault's size below what the GPU would otherwise have run at (under
    a power cap that already binds, a 12 % ceiling may cost 1 %); gaps and absences always
    count."""
    w, g = _window(f, times)
    seen = keep & busy[:, None]
    if f.kind == "power":
        seen &= util > 50
    elif f.kind in _CEILING:
        seen &= slowed
    elif f.kind != "thermal":
        return times.size
    cols = seen[:, g] if f.gpu is not None else seen
    hit = (cols[w] if cols.ndim == 1 else cols[w].any(axis=1)).astype(np.int8)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], hit, [0]])))
    return int((edges[1::2] - edges[::2]).max()) if edges.size else 0


def write_dataset(fleet: Fleet, root: str) -> None:
    """telemetry.parquet, fleet.csv (the absent node included: it is in the fleet) and jobs.csv,
    the layout ``minutiae slownodes DIR`` reads."""
    from pathlib import Path

    p = Path(root)
    p.mkdir(parents=True, exist_ok=True)
    fleet.telemetry.write_parquet(p / "telemetry.parquet")
    fleet.fleet.write_csv(p / "fleet.csv")
    fleet.jobs.write_csv(p / "jobs.csv")

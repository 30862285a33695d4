"""An independent GPU-telemetry fleet for slownodes (NOT the simulator's code path): its own
physics and its own faults, with the ground truth, to check what slownodes finds and misses.

Default: 64 nodes x 8 GPUs x 2 days sampled every 5 min (295k rows). 48 H100 nodes and 16 A100
nodes, 8 racks of 8; the inlet air follows the day (+-3 C) and rack ``r2`` runs 6 C hotter;
jobs of three types (train ~98 % utilisation, finetune ~85 %, infer ~55 %) of 1-16 nodes,
some under a 500 W (H100) / 300 W (A100) power cap (``power_limit_w``; the clock drops and the
SW power-cap reason is set); every GPU has a fixed clock offset within +-1 % and a thermal
resistance within +-4 %.

Faults (``Fault``): ``thermal`` (the GPU runs 15 C hotter at the same power), ``power`` (20 %
less power at full utilisation and clock), ``clock`` (SM clock -12 % with HW slowdown),
``node`` (a whole node -8 % clock, no reason, in a 1-node job), ``gap`` (no samples from a node
or one GPU for a window) and ``absent`` (a node of fleet.csv that never reports). A fault can
outlive a job change (two episodes of one fault window are still one fault).
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
class Fleet:
    telemetry: pl.DataFrame
    fleet: pl.DataFrame
    jobs: pl.DataFrame
    faults: tuple[Fault, ...]
    interval: float


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


def _job_arrays(jobs: list[dict[str, object]], names: list[str], times: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per (time, node): job type index (-1 idle) and whether capped."""
    jt = np.full((times.size, len(names)), -1, dtype=np.int64)
    cap = np.zeros((times.size, len(names)), dtype=bool)
    kinds = list(TYPES)
    for j in jobs:
        on = (times >= float(j["start"])) & (times < float(j["end"]))  # type: ignore[arg-type]
        for n in str(j["nodes"]).split():
            k = names.index(n)
            jt[on, k] = kinds.index(str(j["job_type"]))
            cap[on, k] = bool(j["capped"])
    return jt, cap


def make_fleet(nodes: int = 64, days: float = 2.0, interval: float = 300.0, seed: int = 7,
               faults: tuple[Fault, ...] | None = None) -> Fleet:
    rng = np.random.default_rng(seed)
    names, skus, racks = _nodes(nodes)
    span = days * 86400
    faults = default_faults(names, span) if faults is None else faults
    solo = {f.node: f.start - T0 - 2 * 3600 for f in faults if f.kind == "node"}
    jobs = _schedule(rng, names, skus, span, solo)
    times = T0 + interval * np.arange(int(span // interval))
    jt, cap = _job_arrays(jobs, names, times)
    inlet = 22 + 3 * np.sin(2 * np.pi * (times - T0) / 86400 - np.pi / 2)
    parts = []
    for k, node in enumerate(names):
        if any(f.kind == "absent" and f.node == node for f in faults):
            continue
        parts.append(_node_rows(rng, node, SKUS[skus[k]], racks[k], times, inlet, jt[:, k], cap[:, k],
                                [f for f in faults if f.node == node]))
    tel = pl.concat(parts).sort("time", "node", "gpu")
    fleet = pl.DataFrame({"node": names, "sku": skus, "rack": racks})
    jobs_df = pl.DataFrame({"job_id": [j["job_id"] for j in jobs], "start": [str(j["start"]) for j in jobs],
                            "end": [str(j["end"]) for j in jobs], "nodes": [j["nodes"] for j in jobs],
                            "job_type": [j["job_type"] for j in jobs]})
    return Fleet(tel, fleet, jobs_df, faults, interval)


def _node_rows(rng: np.random.Generator, node: str, sku: dict[str, float], rack: str,
               times: np.ndarray, inlet: np.ndarray, jt: np.ndarray, capped: np.ndarray,
               faults: list[Fault]) -> pl.DataFrame:
    n_t, n_g = times.size, 8
    busy = jt >= 0
    util = np.where(busy, np.array(list(TYPES.values()))[np.maximum(jt, 0)], 0.0)[:, None]
    util = np.clip(util * 100 + rng.normal(0, 1.5, (n_t, n_g)) * busy[:, None], 0, 100)
    spread = rng.uniform(0.99, 1.01, n_g)
    clock = np.where(busy[:, None], sku["clock"] * spread * (1 + rng.normal(0, 0.003, (n_t, n_g))), 210.0)
    power = sku["idle"] + (sku["tdp"] - sku["idle"]) * (util / 100) ** 1.3 * rng.normal(1, 0.02, (n_t, n_g))
    limit = np.where(capped, sku["cap"], sku["tdp"])[:, None] * np.ones(n_g)
    over = power > limit
    clock = np.where(over, clock * (limit / power) ** 0.5, clock)
    power = np.minimum(power, limit * rng.normal(0.995, 0.004, (n_t, n_g)))
    reasons = np.where(busy[:, None], np.where(over, SW_POWER_CAP, 0), IDLE_REASON).astype(np.int64)
    keep = np.ones((n_t, n_g), dtype=bool)
    extra_t = np.zeros((n_t, n_g))
    for f in faults:
        w = (times >= f.start) & (times < f.end)
        g = slice(None) if f.gpu is None else f.gpu
        if f.kind == "thermal":
            extra_t[w, g] += 15.0
        elif f.kind == "power":
            power[w, g] *= np.where(util[w, g] > 50, 0.8, 1.0)
        elif f.kind == "clock" and f.gpu is not None:
            clock[w, f.gpu] *= np.where(busy[w], 1 / 1.12, 1.0)
            reasons[w, f.gpu] |= np.where(busy[w], HW_SLOWDOWN, 0)
        elif f.kind == "node":
            clock[w, :] *= np.where(busy[w], 0.92, 1.0)[:, None]
        elif f.kind == "gap":
            keep[w, g] = False
    r = sku["r"] * rng.uniform(0.96, 1.04, n_g)
    hot = 6.0 if rack == "r2" else 0.0
    temp = inlet[:, None] + hot + 8 + r * power + extra_t + rng.normal(0, 0.7, (n_t, n_g))
    tt, gg = np.meshgrid(times, np.arange(n_g), indexing="ij")
    m = keep.ravel()
    return pl.DataFrame({
        "time": tt.ravel()[m], "node": node, "gpu": gg.ravel()[m].astype(np.int64),
        "sm_clock_mhz": clock.ravel()[m].round(), "power_w": power.ravel()[m].round(1),
        "temp_c": temp.ravel()[m].round(), "util": util.ravel()[m].round(),
        "power_limit_w": limit.ravel()[m], "clock_event_reasons": reasons.ravel()[m],
        "pcie_replay": np.zeros(int(m.sum()), dtype=np.int64)})


def write_dataset(fleet: Fleet, root: str) -> None:
    """telemetry.parquet, fleet.csv (the absent node included: it is in the fleet) and jobs.csv,
    the layout ``minutiae slownodes DIR`` reads."""
    from pathlib import Path

    p = Path(root)
    p.mkdir(parents=True, exist_ok=True)
    fleet.telemetry.write_parquet(p / "telemetry.parquet")
    fleet.fleet.write_csv(p / "fleet.csv")
    fleet.jobs.write_csv(p / "jobs.csv")


#: which finding metrics find which fault kinds
FINDS = {"thermal": ("thermal",), "power": ("power",), "clock": ("sm_clock",), "node": ("sm_clock",)}


@dataclass(frozen=True, slots=True)
class Score:
    found: tuple[Fault, ...]
    missed: tuple[Fault, ...]
    false_alarms: tuple[str, ...]
    gaps_reported: tuple[Fault, ...]
    gaps_missed: tuple[Fault, ...]
    delays_s: tuple[float, ...]  # per found fault: first matching episode start - fault start

    def line(self) -> str:
        n = len(self.found) + len(self.missed)
        g = len(self.gaps_reported) + len(self.gaps_missed)
        return (f"faults found {len(self.found)}/{n}, false alarms {len(self.false_alarms)}, "
                f"gaps/absent reported {len(self.gaps_reported)}/{g}")


def _hits(f: Fault, node: str, gpu: int | None, start: float, end: float) -> bool:
    return (node == f.node and (f.gpu is None or gpu is None or gpu == f.gpu)
            and start < f.end and end > f.start)


def score(faults: tuple[Fault, ...], findings: list[object], unknown: list[object],
          by_metric: bool = True) -> Score:
    """Match findings (``node, gpu, metric, start, end`` attributes) to the injected faults: a
    finding is a hit when it is on the fault's node (and GPU, for a GPU fault), overlaps its
    window and (``by_metric``) its metric is one that finds this kind; every other finding is a
    false alarm. Gap/absent faults must appear among ``unknown`` (same node/GPU, overlapping)."""
    slow = [f for f in faults if f.kind in FINDS]
    holes = [f for f in faults if f.kind not in FINDS]
    found, missed, delays = [], [], []
    used: set[int] = set()
    for f in slow:
        hit = [i for i, x in enumerate(findings)
               if _hits(f, x.node, x.gpu, x.start, x.end)  # type: ignore[attr-defined]
               and (not by_metric or x.metric in FINDS[f.kind])]  # type: ignore[attr-defined]
        used |= set(hit)
        if hit:
            found.append(f)
            delays.append(min(findings[i].start for i in hit) - f.start)  # type: ignore[attr-defined]
        else:
            missed.append(f)
    false = [f"{x.node}/{x.gpu}/{x.metric}@{x.start:.0f}" for i, x in enumerate(findings)  # type: ignore[attr-defined]
             if i not in used and not any(_hits(f, x.node, x.gpu, x.start, x.end) for f in slow)]  # type: ignore[attr-defined]
    rep = [f for f in holes if any(_hits(f, u.node, u.gpu, u.start, u.end) for u in unknown)]  # type: ignore[attr-defined]
    return Score(tuple(found), tuple(missed), tuple(false), tuple(rep),
                 tuple(f for f in holes if f not in rep), tuple(delays))


def observable(fleet: Fleet, min_samples: int = 6) -> tuple[Fault, ...]:
    """The faults a passive monitor can see: thermal/clock/node faults while the GPU(s) were busy,
    power faults at >= 50 % utilisation, for at least ``min_samples`` samples (30 min at 5 min);
    a fault on an idle GPU changes nothing in its telemetry. Gaps and absences always count."""
    out = []
    tel = fleet.telemetry
    for f in fleet.faults:
        if f.kind not in FINDS:
            out.append(f)
            continue
        sel = tel.filter((pl.col("node") == f.node) & (pl.col("time") >= f.start)
                         & (pl.col("time") < f.end) & (pl.col("util") >= (50 if f.kind == "power" else 5)))
        if f.gpu is not None:
            sel = sel.filter(pl.col("gpu") == f.gpu)
        if sel.get_column("time").n_unique() >= min_samples:
            out.append(f)
    return tuple(out)

"""The plan of a simulation (pure, small): which faults happen where and when, planned reboots,
and which jobs run on which nodes. Emitters turn the plan into files; ``truth.jsonl`` is the
plan's fault list. Everything is drawn from one numpy Generator, so a seed fixes the plan."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from minutiae.scoring.truth import TruthEvent
from minutiae.sim.world.fleet import Fleet, build_fleet
from minutiae.sim.world.profile import FaultSpec, Profile

REBOOT_S = 300.0           # a reboot: node down this long, then the kernel boots
TICK_S = 300.0             # scheduler tick
#: fault classes whose slowdown hits one GPU (rank); the others slow the whole node
PER_GPU_SLOW = frozenset({"thermal_throttle", "pcie_degraded", "ib_link_flap", "ib_symbol_errors",
                          "ib_rate_degraded"})


@dataclass(frozen=True, slots=True)
class Job:
    job_id: str
    start: float
    end: float
    nodes: tuple[str, ...]
    signature: str
    step_s: float              # seconds per step before slowdowns (rollout effect included)
    outcome: str               # completed | failed | preempted


@dataclass(frozen=True, slots=True)
class Maintenance:
    time: float
    node: str
    what: str


@dataclass
class Plan:
    profile: Profile
    fleet: Fleet
    start: float
    end: float
    seed: int
    truth: list[TruthEvent]
    maintenance: list[Maintenance]
    jobs: list[Job]
    boots: dict[str, list[float]] = field(default_factory=dict)  # boot times, first one before start

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.fleet.nodes]

    def faults_on(self, node: str) -> list[TruthEvent]:
        return [t for t in self.truth if t.node == node]


def _exposure(spec: FaultSpec, gpus: int, days: float) -> float:
    if spec.unit in ("per_1000_gpu_days", "per_1000_port_days"):
        return spec.rate / 1000.0 * gpus * days
    return spec.rate / 1000.0 * days


def _duration(spec: FaultSpec, rng: np.random.Generator) -> float | None:
    rng_pair = spec.duration_s or (
        (spec.repair_hours[0] * 3600, spec.repair_hours[1] * 3600) if spec.repair_hours else None)
    if rng_pair is None:
        return None
    return float(rng.uniform(*rng_pair))


def _draw_faults(profile: Profile, fleet: Fleet, start: float, end: float,
                 rng: np.random.Generator) -> tuple[list[TruthEvent], set[str]]:
    days = (end - start) / 86400.0
    g = fleet.gpus_per_node
    n = len(fleet.nodes)
    out: list[TruthEvent] = []
    lemons: set[str] = set()
    specs = [f for f in profile.faults if f.harmful]
    for spec in specs:
        if spec.unit != "fraction_of_nodes":
            continue
        chosen = np.flatnonzero(rng.random(n) < spec.rate)
        for i in chosen:
            node = fleet.nodes[int(i)].name
            if spec.cls == "lemon_node":
                lemons.add(node)
            out.append(TruthEvent(
                id="", cls=spec.cls, node=node, component=None, start=start, end=end,
                severity=spec.severity, expect_drain=spec.expect_drain, signature=spec.signature,
                details={"slowdown": round(float(rng.uniform(*spec.slowdown)), 4)}
                if spec.slowdown[1] > 0 else {"multiplier": spec.multiplier}))
    lemon_mult = next((s.multiplier for s in specs if s.cls == "lemon_node"), 1.0)
    lemon_mask = np.array([nd.name in lemons for nd in fleet.nodes])
    for spec in specs:
        if spec.unit == "fraction_of_nodes":
            continue
        lam = np.full(n, _exposure(spec, g, days))
        if spec.crash and spec.expect_drain:
            lam = np.where(lemon_mask, lam * lemon_mult, lam)
        counts = rng.poisson(lam)
        for i in np.flatnonzero(counts):
            node = fleet.nodes[int(i)].name
            for _ in range(int(counts[i])):
                t0 = float(rng.uniform(start, end))
                dur = _duration(spec, rng)
                gpu = int(rng.integers(g))
                details: dict[str, object] = {"gpu": gpu}
                if spec.slowdown[1] > 0:
                    details["slowdown"] = round(float(rng.uniform(*spec.slowdown)), 4)
                if spec.crash:
                    details["crash"] = True
                if node in lemons and spec.crash and spec.expect_drain:
                    details["lemon"] = True
                comp = f"ib:{gpu}" if spec.cls.startswith("ib_") else f"gpu:{gpu}"
                if spec.cls in ("mce_corrected", "edac_ue", "oom_kill", "hung_task", "nfs_timeout",
                                "fail_slow"):
                    comp = "host"
                out.append(TruthEvent(
                    id="", cls=spec.cls, node=node, component=comp, start=t0,
                    end=min(end, t0 + dur) if dur is not None else end, severity=spec.severity,
                    expect_drain=spec.expect_drain, signature=spec.signature, details=details))
    return out, lemons


def _drop_while_down(events: list[TruthEvent]) -> list[TruthEvent]:
    """A node that is down (repairing after a crash) cannot fail again until it is back."""
    keep: list[TruthEvent] = []
    down: dict[str, float] = {}
    for ev in sorted(events, key=lambda e: (e.start, e.cls)):
        if ev.node is None or ev.component is None:   # whole-span records (lemons, stragglers)
            keep.append(ev)
            continue
        if ev.start < down.get(ev.node, -1.0):
            continue
        keep.append(ev)
        if ev.details.get("crash") and ev.expect_drain:
            down[ev.node] = ev.end
    return keep


def _schedule(profile: Profile, fleet: Fleet, start: float, end: float, downs: dict[str, list[tuple[float, float]]],
              planned: dict[str, list[float]], crashes: dict[str, list[float]],
              rng: np.random.Generator) -> list[Job]:
    names = [nd.name for nd in fleet.nodes]
    n = len(names)
    busy_until = np.full(n, start)
    intervals = sorted((s, e, i) for i, nm in enumerate(names) for s, e in downs.get(nm, ()))
    down_until = np.full(n, -np.inf)
    ptr = 0
    jobs: list[Job] = []
    dur_lo, dur_hi = (float(x) * 3600 for x in profile.jobs.get("duration_hours", [2, 12]))
    restart = float(profile.jobs.get("restart_minutes", 10)) * 60
    sigs = profile.signatures
    jid = 100001
    t = start
    while t < end - TICK_S:
        while ptr < len(intervals) and intervals[ptr][0] <= t:
            s, e, i = intervals[ptr]
            down_until[i] = max(down_until[i], e)
            ptr += 1
        avail = np.flatnonzero((busy_until <= t) & (down_until <= t))
        while len(avail):
            sig = sigs[int(rng.integers(len(sigs)))]
            sizes = [s for s in sig.sizes if s <= len(avail)]
            if not sizes:
                sizes = [s for x in sigs for s in x.sizes if s <= len(avail)]
                if not sizes:
                    break
                sig = next(x for x in sigs if sizes[0] in x.sizes)
            size = int(sizes[int(rng.integers(len(sizes)))])
            chosen = avail[:size]
            avail = avail[size:]
            job_end = min(end, t + float(rng.uniform(dur_lo, dur_hi)))
            outcome = "completed"
            for i in chosen:
                nm = names[int(i)]
                k = bisect.bisect_right(planned.get(nm, []), t)
                if k < len(planned.get(nm, [])) and planned[nm][k] - 60 < job_end:
                    job_end, outcome = planned[nm][k] - 60, "preempted"
            for i in chosen:
                nm = names[int(i)]
                k = bisect.bisect_right(crashes.get(nm, []), t)
                if k < len(crashes.get(nm, [])) and crashes[nm][k] < job_end:
                    job_end, outcome = crashes[nm][k], "failed"
            if job_end <= t + 60:
                busy_until[chosen] = t + TICK_S
                continue
            nodes = tuple(names[int(i)] for i in chosen)
            step = sig.step_s
            for ro in profile.rollouts:
                if ro.effect and ro.signature in ("", sig.name):
                    new = sum(fleet.version_at(fleet.nodes[int(i)], ro.attr, t) == ro.new for i in chosen)
                    if new * 2 >= len(chosen):
                        step *= 1.0 + ro.effect
            jobs.append(Job(str(jid), t, job_end, nodes, sig.name, step, outcome))
            jid += 1
            busy_until[chosen] = job_end + (restart if outcome == "failed" else 0.0)
        t += TICK_S
    return jobs


def _job_at(jobs_by_node: dict[str, list[Job]], node: str, t: float) -> Job | None:
    for j in jobs_by_node.get(node, ()):
        if j.start <= t < j.end or (j.outcome == "failed" and j.end == t):
            return j
    return None


def make_plan(profile: Profile, n_nodes: int, gpus_per_node: int, days: float, seed: int,
              start: float) -> Plan:
    rng = np.random.default_rng(seed)
    end = start + days * 86400.0
    fleet = build_fleet(profile, n_nodes, gpus_per_node, start, rng)
    faults, _lemons = _draw_faults(profile, fleet, start, end, rng)
    faults = _drop_while_down(faults)
    settle = float(profile.sampling.get("boot_settle_s", 180))
    maint: list[Maintenance] = []
    benign: list[TruthEvent] = []
    reboot_spec = next((f for f in profile.faults if f.cls == "planned_reboot"), None)
    planned: dict[str, list[float]] = {}
    downs: dict[str, list[tuple[float, float]]] = {}
    crashes: dict[str, list[float]] = {}
    for ev in faults:
        if ev.node and ev.details.get("crash"):
            crashes.setdefault(ev.node, []).append(ev.start)
            if ev.expect_drain:
                downs.setdefault(ev.node, []).append((ev.start, ev.end))
        if ev.cls == "pcie_degraded" and ev.node:
            planned.setdefault(ev.node, []).append(ev.start - REBOOT_S)
    if reboot_spec is not None:
        for nd in fleet.nodes:
            for _ in range(int(rng.poisson(reboot_spec.rate / 1000.0 * days))):
                planned.setdefault(nd.name, []).append(float(rng.uniform(start, end - REBOOT_S)))
    for node, times in planned.items():
        times.sort()
        ok = [t for t in times if not any(s <= t <= e for s, e in downs.get(node, ()))]
        planned[node] = ok
        for t in ok:
            maint.append(Maintenance(t, node, "planned reboot"))
            downs.setdefault(node, []).append((t, t + REBOOT_S + settle))
            benign.append(TruthEvent(
                id="", cls="planned_reboot", node=node, component="host", start=t,
                end=t + REBOOT_S + settle + 300, severity="info", expect_drain=False,
                signature=reboot_spec.signature if reboot_spec else ("kern.log",), harmful=False,
                details={"boot": t + REBOOT_S}))
    for v in crashes.values():
        v.sort()
    jobs = _schedule(profile, fleet, start, end, downs, planned, crashes, rng)
    by_node: dict[str, list[Job]] = {}
    for j in jobs:
        for nm in j.nodes:
            by_node.setdefault(nm, []).append(j)
    enriched: list[TruthEvent] = []
    for ev in faults:
        if ev.node is None:
            enriched.append(ev)
            continue
        running = _job_at(by_node, ev.node, ev.start)
        d = dict(ev.details)
        if running is not None:
            d.update(job_id=running.job_id, job_gpus=len(running.nodes) * gpus_per_node,
                     step_s=round(running.step_s, 4))
        enriched.append(TruthEvent(ev.id, ev.cls, ev.node, ev.component, ev.start, ev.end,
                                   ev.severity, ev.expect_drain, ev.signature, ev.harmful, d))
    for spec in profile.faults:
        if spec.harmful or spec.unit not in ("per_job", "per_fleet") or spec.rate <= 0:
            continue
        if spec.cls == "boot_settle":
            continue                      # one record per boot, added once boots are known
        if spec.unit == "per_fleet":
            benign.append(TruthEvent("", spec.cls, None, None, start, end, "info", False,
                                     spec.signature, False, {"scope": "fleet"}))
            continue
        for j in jobs:
            if spec.cls == "peermem_teardown":
                if j.end >= end:
                    continue
                hit = [nm for nm in j.nodes if rng.random() < min(1.0, spec.rate)]
                if hit:
                    benign.append(TruthEvent("", spec.cls, None, f"job:{j.job_id}", j.end, j.end + 60,
                                             "info", False, spec.signature, False,
                                             {"job_id": j.job_id, "nodes": hit}))
                continue
            benign.append(TruthEvent("", spec.cls, None, f"job:{j.job_id}", j.start, j.end, "info",
                                     False, spec.signature, False,
                                     {"job_id": j.job_id, "nodes": list(j.nodes)}))
    for app in _app_xids(profile, fleet, start, end, rng, downs).values():
        benign.extend(app)
    for ro in profile.rollouts:
        if not ro.effect:
            continue
        first = min((c.time for c in fleet.changes if c.attr == ro.attr and c.new == ro.new), default=None)
        if first is None:
            continue
        enriched.append(TruthEvent(
            "", "perf_regression", None, f"{ro.attr}={ro.new}", first, end, "warning", False,
            ("runs", "timings"), True,
            {"scope": "fleet", "signature": ro.signature, "change": ro.effect, "attr": ro.attr,
             "new": ro.new}))
    allev = sorted(enriched + benign, key=lambda e: (e.start, e.node or "", e.cls))
    truth = [TruthEvent(f"f{i:05d}", e.cls, e.node, e.component, e.start, e.end, e.severity,
                        e.expect_drain, e.signature, e.harmful, e.details) for i, e in enumerate(allev)]
    boots = {nd.name: [start - float(rng.uniform(86400, 20 * 86400))] for nd in fleet.nodes}
    for m in maint:
        boots[m.node].append(m.time + REBOOT_S)
    for ev in truth:
        if ev.harmful and ev.node and ev.details.get("crash") and ev.expect_drain and ev.end < end:
            boots[ev.node].append(ev.end)
    for v in boots.values():
        v.sort()
    settle_spec = next((f for f in profile.faults if f.cls == "boot_settle" and f.rate > 0), None)
    if settle_spec is not None:
        extra = [TruthEvent("", "boot_settle", node, "host", b, b + settle + 120.0, "info", False,
                            settle_spec.signature, False, {"boot": b})
                 for node, bs in boots.items() for b in bs if start <= b < end]
        n0 = len(truth)
        truth = sorted(truth + extra, key=lambda e: (e.start, e.node or "", e.cls))
        truth = [TruthEvent(f"f{i:05d}", e.cls, e.node, e.component, e.start, e.end, e.severity,
                            e.expect_drain, e.signature, e.harmful, e.details)
                 for i, e in enumerate(truth)] if len(truth) != n0 else truth
    maint.sort(key=lambda m: (m.time, m.node))
    return Plan(profile, fleet, start, end, seed, truth, maint, jobs, boots)


def _app_xids(profile: Profile, fleet: Fleet, start: float, end: float, rng: np.random.Generator,
              downs: dict[str, list[tuple[float, float]]]) -> dict[str, list[TruthEvent]]:
    spec = next((f for f in profile.faults if f.cls == "app_xid"), None)
    out: dict[str, list[TruthEvent]] = {}
    if spec is None or spec.rate <= 0:
        return out
    days = (end - start) / 86400.0
    codes = spec.codes or (13, 31, 43)
    for nd in fleet.nodes:
        for _ in range(int(rng.poisson(spec.rate / 1000.0 * days))):
            t = float(rng.uniform(start, end))
            if any(s <= t <= e for s, e in downs.get(nd.name, ())):
                continue
            gpu = int(rng.integers(fleet.gpus_per_node))
            out.setdefault(nd.name, []).append(TruthEvent(
                "", "app_xid", nd.name, f"gpu:{gpu}", t, t + 60, "info", False, spec.signature,
                False, {"gpu": gpu, "code": int(codes[int(rng.integers(len(codes)))])}))
    return out

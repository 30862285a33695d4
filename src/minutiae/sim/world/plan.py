"""The plan of a simulation (pure, small): which faults happen where and when, planned reboots,
and which jobs run on which nodes. Emitters turn the plan into files; ``truth.jsonl`` is the
plan's fault list. Everything is drawn from one numpy Generator, so a seed fixes the plan."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from minutiae.scoring.truth import TruthEvent
from minutiae.sim.world.faults import draw_faults, drop_while_down
from minutiae.sim.world.fleet import Fleet, build_fleet
from minutiae.sim.world.job import Job as Job
from minutiae.sim.world.profile import Profile
from minutiae.sim.world.shape import SHAPE_CLASSES, shape_truth

REBOOT_S = 300.0           # a reboot: node down this long, then the kernel boots
TICK_S = 300.0             # scheduler tick
#: fault classes whose slowdown hits one GPU (rank); the others slow the whole node
PER_GPU_SLOW = frozenset({"thermal_throttle", "pcie_degraded", "ib_link_flap", "ib_symbol_errors",
                          "ib_rate_degraded"})


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


def _outages(faults: list[TruthEvent]) -> tuple[dict[str, list[float]], dict[str, list[tuple[float, float]]],
                                                dict[str, list[float]]]:
    """Per node from the faults: planned reboots (a degraded PCIe link is fixed by one), down
    intervals (a crash that needs a drain) and crash times."""
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
    return planned, downs, crashes


def _planned_reboots(profile: Profile, fleet: Fleet, start: float, end: float, planned: dict[str, list[float]],
                     downs: dict[str, list[tuple[float, float]]], rng: np.random.Generator
                     ) -> tuple[list[Maintenance], list[TruthEvent]]:
    """The planned reboots (drawn, plus those in ``planned``; none while a node is down): the
    maintenance windows and their must-not-alarm truth. ``planned`` and ``downs`` are updated."""
    days = (end - start) / 86400.0
    settle = float(profile.sampling.get("boot_settle_s", 180))
    reboot_spec = next((f for f in profile.faults if f.cls == "planned_reboot"), None)
    maint: list[Maintenance] = []
    benign: list[TruthEvent] = []
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
    return maint, benign


def _with_jobs(faults: list[TruthEvent], jobs: list[Job], gpus_per_node: int) -> list[TruthEvent]:
    """The faults, each with the job that ran on its node when it started (id, GPUs, step)."""
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
    return enriched


def _job_benign(profile: Profile, jobs: list[Job], start: float, end: float,
                rng: np.random.Generator) -> list[TruthEvent]:
    """The must-not-alarm properties of every job or of the fleet (``per_job``/``per_fleet``)."""
    out: list[TruthEvent] = []
    for spec in profile.faults:
        if spec.harmful or spec.unit not in ("per_job", "per_fleet") or spec.rate <= 0:
            continue
        if spec.cls == "boot_settle" or spec.cls in SHAPE_CLASSES:
            continue                      # per boot (added once boots are known); per job shape
        if spec.unit == "per_fleet":
            out.append(TruthEvent("", spec.cls, None, None, start, end, "info", False,
                                  spec.signature, False, {"scope": "fleet"}))
            continue
        for j in jobs:
            if spec.cls == "peermem_teardown":
                if j.end >= end:
                    continue
                hit = [nm for nm in j.nodes if rng.random() < min(1.0, spec.rate)]
                if hit:
                    out.append(TruthEvent("", spec.cls, None, f"job:{j.job_id}", j.end, j.end + 60,
                                          "info", False, spec.signature, False,
                                          {"job_id": j.job_id, "nodes": hit}))
                continue
            out.append(TruthEvent("", spec.cls, None, f"job:{j.job_id}", j.start, j.end, "info",
                                  False, spec.signature, False,
                                  {"job_id": j.job_id, "nodes": list(j.nodes)}))
    return out


def _regressions(profile: Profile, fleet: Fleet, end: float) -> list[TruthEvent]:
    """A rollout with a performance effect: one fleet-wide regression from its first change."""
    out = []
    for ro in profile.rollouts:
        if not ro.effect:
            continue
        first = min((c.time for c in fleet.changes if c.attr == ro.attr and c.new == ro.new), default=None)
        if first is None:
            continue
        out.append(TruthEvent(
            "", "perf_regression", None, f"{ro.attr}={ro.new}", first, end, "warning", False,
            ("runs", "timings"), True,
            {"scope": "fleet", "signature": ro.signature, "change": ro.effect, "attr": ro.attr,
             "new": ro.new}))
    return out


def _numbered(events: list[TruthEvent]) -> list[TruthEvent]:
    """In time order, with ids ``f00000`` ... (sorting is stable: equal keys keep their order)."""
    ordered = sorted(events, key=lambda e: (e.start, e.node or "", e.cls))
    return [TruthEvent(f"f{i:05d}", e.cls, e.node, e.component, e.start, e.end, e.severity,
                       e.expect_drain, e.signature, e.harmful, e.details) for i, e in enumerate(ordered)]


def _boots(fleet: Fleet, maint: list[Maintenance], truth: list[TruthEvent], start: float, end: float,
           rng: np.random.Generator) -> dict[str, list[float]]:
    """Every node's boot times: one before the start, after each planned reboot and repair."""
    boots = {nd.name: [start - float(rng.uniform(86400, 20 * 86400))] for nd in fleet.nodes}
    for m in maint:
        boots[m.node].append(m.time + REBOOT_S)
    for ev in truth:
        if ev.harmful and ev.node and ev.details.get("crash") and ev.expect_drain and ev.end < end:
            boots[ev.node].append(ev.end)
    for v in boots.values():
        v.sort()
    return boots


def _with_boot_settle(profile: Profile, truth: list[TruthEvent], boots: dict[str, list[float]],
                      start: float, end: float) -> list[TruthEvent]:
    """The truth with one must-not-alarm ``boot_settle`` record per boot inside the span."""
    settle = float(profile.sampling.get("boot_settle_s", 180))
    spec = next((f for f in profile.faults if f.cls == "boot_settle" and f.rate > 0), None)
    if spec is None:
        return truth
    extra = [TruthEvent("", "boot_settle", node, "host", b, b + settle + 120.0, "info", False,
                        spec.signature, False, {"boot": b})
             for node, bs in boots.items() for b in bs if start <= b < end]
    return _numbered(truth + extra) if extra else truth


def make_plan(profile: Profile, n_nodes: int, gpus_per_node: int, days: float, seed: int,
              start: float) -> Plan:
    """The whole simulation, drawn from one seed: fleet, faults, reboots, jobs, truth, boots
    (the draws happen in this order, so a seed always gives the same plan)."""
    rng = np.random.default_rng(seed)
    end = start + days * 86400.0
    fleet = build_fleet(profile, n_nodes, gpus_per_node, start, rng)
    faults, _lemons = draw_faults(profile, fleet, start, end, rng)
    faults = drop_while_down(faults)
    planned, downs, crashes = _outages(faults)
    maint, benign = _planned_reboots(profile, fleet, start, end, planned, downs, rng)
    for v in crashes.values():
        v.sort()
    jobs = _schedule(profile, fleet, start, end, downs, planned, crashes, rng)
    enriched = _with_jobs(faults, jobs, gpus_per_node)
    benign += _job_benign(profile, jobs, start, end, rng)
    benign += shape_truth(profile, jobs, gpus_per_node)
    for app in _app_xids(profile, fleet, start, end, rng, downs).values():
        benign.extend(app)
    enriched += _regressions(profile, fleet, end)
    truth = _numbered(enriched + benign)
    boots = _boots(fleet, maint, truth, start, end, rng)
    truth = _with_boot_settle(profile, truth, boots, start, end)
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

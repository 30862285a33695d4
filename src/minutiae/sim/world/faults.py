"""The harmful faults of a simulation, drawn from the profile's rates (pure: the Generator is
passed in, and the draws happen in a fixed order so that a seed fixes them)."""

from __future__ import annotations

import numpy as np

from minutiae.scoring.truth import TruthEvent
from minutiae.sim.world.fleet import Fleet
from minutiae.sim.world.profile import FaultSpec, Profile


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


def draw_faults(profile: Profile, fleet: Fleet, start: float, end: float,
                rng: np.random.Generator) -> tuple[list[TruthEvent], set[str]]:
    """The harmful faults of the span: per-node fractions (lemons, stragglers) chosen once, then
    every rated class's Poisson counts per node (a lemon's crashes at its multiplier); and the
    lemon nodes."""
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


def drop_while_down(events: list[TruthEvent]) -> list[TruthEvent]:
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

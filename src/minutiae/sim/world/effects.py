"""How truth events change what a node measures: slowdowns per GPU over time (pure numpy)."""

from __future__ import annotations

import numpy as np

from minutiae.scoring.truth import TruthEvent

#: classes whose slowdown hits one GPU/rank (the rest slow the whole node)
PER_GPU = frozenset({"thermal_throttle", "pcie_degraded", "ib_link_flap", "ib_symbol_errors",
                     "ib_rate_degraded"})
NODE_WIDE = frozenset({"persistent_straggler", "fail_slow", "hung_task"})
#: classes that lower the SM clock (visible in telemetry); others only show in step times
CLOCK = frozenset({"thermal_throttle", "persistent_straggler"})


def slowdown(events: list[TruthEvent], times: np.ndarray, gpus: int,
             classes: frozenset[str] = PER_GPU | NODE_WIDE) -> np.ndarray:
    """Additive slowdown fraction per (time, gpu): 0.1 means 10 % slower."""
    out = np.zeros((len(times), gpus))
    for ev in events:
        s = float(ev.details.get("slowdown", 0.0))
        if s <= 0 or ev.cls not in classes:
            continue
        win = (times >= ev.start) & (times < ev.end)
        if ev.cls in PER_GPU:
            out[win, int(ev.details.get("gpu", 0)) % gpus] += s
        else:
            out[win, :] += s
    return out


def diurnal(times: np.ndarray, amplitude: float) -> np.ndarray:
    return 1.0 + amplitude * np.sin(2.0 * np.pi * (times % 86400.0) / 86400.0)


def busy_mask(times: np.ndarray, intervals: list[tuple[float, float]]) -> np.ndarray:
    m = np.zeros(len(times), dtype=bool)
    for s, e in intervals:
        m |= (times >= s) & (times < e)
    return m


def cumulative(inc: np.ndarray, times: np.ndarray, boots: list[float]) -> np.ndarray:
    """Running totals of per-sample increments that restart at every boot (driver-held
    counters such as volatile ECC, PCIe replay and IB port counters reset when the node boots)."""
    c = np.cumsum(inc, axis=0)
    for b in boots:
        i = int(np.searchsorted(times, b))
        if 0 < i < len(times):
            c[i:] -= c[i - 1].copy()
    return c

"""The slownodes vocabulary shared by both drivers (``analysis`` whole-table, ``chunked`` by
chunks): options, findings, the report, NVML clock-event reasons, and the evidence sentence.
Pure; no I/O."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

REASONS = {0x2: "applications clocks setting", 0x4: "SW power cap", 0x8: "HW slowdown",
           0x10: "sync boost", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
           0x80: "HW power brake"}
GPU_IDLE = 0x1


@dataclass(frozen=True, slots=True)
class SlowOptions:
    min_deficit: float = 0.03
    z: float = 5.0
    ib_deficit: float = 0.2
    min_duration: float = 1800.0
    min_peers: int = 4
    pcie_per_hour: float = 10.0
    thermal_c: float = 8.0        # C above the thermal model (rack peers at the same power)
    power_deficit: float = 0.12   # power below peers at the same utilisation and clock
    ppw_deficit: float = 0.12     # throughput per watt below peers
    min_util: float = 50.0        # utilisation (%) below which power is not compared
    gap_min_s: float = 900.0      # shortest telemetry gap reported as UNKNOWN


@dataclass(frozen=True, slots=True)
class SlowFinding:
    """A GPU (``gpu`` set), node (``scope`` node) or NIC rail (``metric`` ib_xmit) persistently
    worse than its peers. ``deficit``: median fraction below the peer median over the episode
    (0.11 = 11 % below); ``z``: that deficit over the fleet's robust noise; ``start``/``end``:
    epoch seconds of the episode; ``reasons``: clock-event reasons active in most of its
    samples; ``evidence``: one sentence for people."""

    node: str
    gpu: int | None
    scope: str
    metric: str
    deficit: float
    z: float
    start: float
    end: float
    samples: int
    peers: int
    reasons: tuple[str, ...]
    temp_delta_c: float | None
    power_deficit: float | None
    pcie_replays_per_hour: float | None
    evidence: str
    detected_at: float = 0.0

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    @property
    def time(self) -> float:
        """When the episode became persistent (its first sample + the minimum duration): the
        earliest moment a live run of the same analysis would have reported it."""
        return self.detected_at

    @property
    def reason(self) -> str:
        return self.evidence

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "gpu": self.gpu, "scope": self.scope, "metric": self.metric,
                "deficit": round(self.deficit, 4), "z": round(self.z, 1), "start": self.start,
                "end": self.end, "duration_s": round(self.duration_s, 1), "samples": self.samples,
                "peers": self.peers, "reasons": list(self.reasons),
                "temp_delta_c": rnd(self.temp_delta_c, 1), "power_deficit": rnd(self.power_deficit, 4),
                "pcie_replays_per_hour": rnd(self.pcie_replays_per_hour, 1),
                "evidence": self.evidence, "detected_at": self.detected_at}


@dataclass(frozen=True, slots=True)
class SlowReport:
    """``noise``: robust spread of SM-clock deficits among peers (fraction)."""

    findings: tuple[SlowFinding, ...]
    gpus: int
    nodes: int
    samples: int
    interval_s: float
    noise: float
    warnings: tuple[str, ...]
    unknown: tuple[SlowUnknown, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"suspects": [f.to_json() for f in self.findings], "gpus": self.gpus,
                "nodes": self.nodes, "samples": self.samples, "interval_s": self.interval_s,
                "noise": round(self.noise, 5), "warnings": list(self.warnings),
                "unknown": [u.to_json() for u in self.unknown]}


@dataclass(frozen=True, slots=True)
class SlowUnknown:
    """A node (``gpu`` None) or GPU without telemetry from ``start`` to ``end``: UNKNOWN there,
    neither slow nor healthy. ``reason``: ``gap`` (samples stopped, then resumed or not) or
    ``absent`` (in fleet.csv, never reported)."""

    node: str
    gpu: int | None
    start: float
    end: float
    reason: str

    @property
    def text(self) -> str:
        who = f"node {self.node}" if self.gpu is None else f"GPU {self.gpu} on node {self.node}"
        what = "never reported" if self.reason == "absent" else "sent no telemetry"
        return f"UNKNOWN: {who} {what} for {minutes(self.end - self.start)} (from {self.start:.0f})"

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "gpu": self.gpu, "start": self.start, "end": self.end,
                "duration_s": round(self.end - self.start, 1), "reason": self.reason,
                "status": "UNKNOWN", "text": self.text}


def rnd(x: float | None, nd: int) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def minutes(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


def decode_reasons(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit]


def with_evidence(f: SlowFinding, gpus: int | None = None, of: int | None = None) -> SlowFinding:
    """``gpus`` of ``of`` GPUs of a node finding (``all 8 GPUs`` only when they are all)."""
    of = of or gpus
    if f.metric == "pcie_replay":
        text = (f"GPU {f.gpu} on node {f.node} logged {f.pcie_replays_per_hour or 0:.0f} PCIe "
                f"replays/h for {minutes(f.duration_s)} (a retrying link), SM clock "
                f"{-f.deficit:+.0%} vs peers")
        return replace(f, evidence=text)
    if f.metric in _OTHER:
        return replace(f, evidence=_OTHER[f.metric](f))
    what = "IB transmit rate" if f.metric == "ib_xmit" else "SM clock"
    who = (f"{'all' if gpus == of else f'{gpus} of'} {of} GPUs on node {f.node}" if gpus
           else f"GPU {f.gpu} on node {f.node}")
    text = (f"{who} ran {f.deficit:.0%} below {'their' if gpus else 'its'} peers' {what} for "
            f"{minutes(f.duration_s)}")
    extra = []
    if f.reasons:
        extra.append(", ".join(f.reasons) + " active")
    elif f.metric == "sm_clock":
        extra.append("no clock-event reason reported")
    if f.temp_delta_c is not None and abs(f.temp_delta_c) >= 5:
        extra.append(f"{f.temp_delta_c:+.0f} C vs peers")
    if f.pcie_replays_per_hour is not None and f.pcie_replays_per_hour >= 1:
        extra.append(f"{f.pcie_replays_per_hour:.0f} PCIe replays/h")
    text += (", " + ", ".join(extra)) if extra else ""
    return replace(f, evidence=text)




def _thermal(f: SlowFinding) -> str:
    return (f"GPU {f.gpu} on node {f.node} ran {f.deficit:+.0f} C hotter than its rack peers at "
            f"the same power (thermal-resistance model) for {minutes(f.duration_s)}"
            + (f", {', '.join(f.reasons)} active" if f.reasons else ""))


def _power(f: SlowFinding) -> str:
    return (f"GPU {f.gpu} on node {f.node} drew {f.deficit:.0%} less power than its peers at the "
            f"same utilisation and clock for {minutes(f.duration_s)}")


def _ppw(f: SlowFinding) -> str:
    return (f"GPU {f.gpu} on node {f.node} delivered {f.deficit:.0%} less throughput per watt "
            f"than its peers for {minutes(f.duration_s)}")


_OTHER = {"thermal": _thermal, "power": _power, "perf_per_watt": _ppw}

"""What ``run_check`` remembers between cycles (pure data, JSON round trip).

- ``counters``: the previous numeric observations (for rates and increases);
- ``log_cursor``: how far the kernel log was read (an opaque JSON object from
  ``minutiae.node.sources.kernel_log.read_kmsg``), so a cycle only parses the lines that are new;
- ``log_findings``: the kernel-log findings since boot, one per distinct (kind, code, PCI,
  message) with ``attrs["count"]``: a fault seen in an earlier cycle keeps the node's status
  until the log is reset (reboot, rotation), not just for the cycle that read its line;
- ``gates``: the check engine's state for the counter rules with a gate (persistence, healthy
  delay, flapping: :mod:`minutiae.rules.counters.gate`), ``EngineState.to_dict()``;
- ``drained_for`` / ``acknowledged``: the kernel-log findings ``--slurm`` drained the node for,
  and those an admin acknowledged by resuming that drain (key → count at that moment): an
  acknowledged fault drains again only if it happens again (its count grows).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from minutiae.model import Action, Finding, Severity

#: at most this many distinct kernel-log findings are remembered (oldest dropped first)
MAX_LOG_FINDINGS = 500


@dataclass
class CheckMemory:
    counters: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    log_cursor: dict[str, Any] | None = None
    log_findings: list[Finding] = field(default_factory=list)
    log_events: int = 0  # kernel-log lines scanned since the log (re)started
    drained_for: list[str] = field(default_factory=list)
    acknowledged: dict[str, int] = field(default_factory=dict)
    #: the check engine's state (``EngineState.to_json()``) for the log-count rules
    engine: str | None = None
    #: the check engine's state (``EngineState.to_dict()``) for the gated counter rules
    gates: dict[str, Any] | None = None

    def add_log_findings(self, findings: Iterable[Finding]) -> None:
        """Merge new findings: the same (kind, code, pci, message) bumps ``count``, keeps the
        latest line and time."""
        index = {_key(f): i for i, f in enumerate(self.log_findings)}
        for f in findings:
            k = _key(f)
            if k in index:
                old = self.log_findings[index[k]]
                count = int(old.attrs.get("count", 1) or 1) + 1
                self.log_findings[index[k]] = _with_count(f, count)
            else:
                index[k] = len(self.log_findings)
                self.log_findings.append(_with_count(f, 1))
        if len(self.log_findings) > MAX_LOG_FINDINGS:
            worst = sorted(self.log_findings, key=lambda f: (f.action, f.severity), reverse=True)
            keep = set(map(id, worst[:MAX_LOG_FINDINGS]))
            self.log_findings = [f for f in self.log_findings if id(f) in keep]

    def reset_log(self) -> None:
        self.log_findings = []
        self.log_events = 0
        self.drained_for = []
        self.acknowledged = {}
        self.engine = None

    def is_acknowledged(self, f: Finding) -> bool:
        """True for a kernel-log finding an admin acknowledged and that has not happened since."""
        k = finding_key(f)
        return k in self.acknowledged and _count(f) <= self.acknowledged[k]

    def acknowledge_drain(self) -> list[str]:
        """Our drain was resumed by someone else: acknowledge what it was for."""
        counts = {finding_key(f): _count(f) for f in self.log_findings}
        done = [k for k in self.drained_for if k in counts]
        for k in done:
            self.acknowledged[k] = counts[k]
        self.drained_for = []
        return done

    def to_json(self) -> dict[str, Any]:
        return {
            "counters": {f"{c}|{m}": [v, t] for (c, m), (v, t) in sorted(self.counters.items())},
            "counter_gates": self.gates,
            "kernel_log": {
                "cursor": self.log_cursor,
                "events": self.log_events,
                "findings": [finding_to_json(f) for f in self.log_findings],
                "drained_for": list(self.drained_for),
                "acknowledged": dict(self.acknowledged),
                "engine": self.engine,
            },
        }

    @classmethod
    def from_json(cls, doc: Any) -> CheckMemory:
        """Raises ``ValueError``/``KeyError``/``TypeError`` on a malformed document."""
        mem = cls()
        for key, pair in dict(doc.get("counters", {})).items():
            comp, _, metric = str(key).rpartition("|")
            v, t = pair
            if comp and isinstance(v, int | float) and isinstance(t, int | float):
                mem.counters[(comp, metric)] = (float(v), float(t))
        kl = doc.get("kernel_log") or {}
        cursor = kl.get("cursor")
        mem.log_cursor = dict(cursor) if isinstance(cursor, dict) else None
        mem.log_events = int(kl.get("events", 0))
        mem.log_findings = [finding_from_json(d) for d in kl.get("findings", [])]
        mem.drained_for = [str(k) for k in kl.get("drained_for", [])]
        mem.acknowledged = {str(k): int(v) for k, v in dict(kl.get("acknowledged", {})).items()}
        engine = kl.get("engine")
        mem.engine = engine if isinstance(engine, str) else None
        gates = doc.get("counter_gates")
        mem.gates = gates if isinstance(gates, dict) else None
        return mem


def _key(f: Finding) -> tuple[str, int | None, str | None, str]:
    return (f.kind, f.code, f.pci, f.message)


def finding_key(f: Finding) -> str:
    """A stable text key of a kernel-log finding (kind, code, PCI address, message)."""
    return f"{f.kind}|{f.code if f.code is not None else ''}|{f.pci or ''}|{f.message}"


def _count(f: Finding) -> int:
    n = f.attrs.get("count", 1)
    return n if isinstance(n, int) else 1


def _with_count(f: Finding, count: int) -> Finding:
    attrs = dict(f.attrs)
    attrs["count"] = count
    return Finding(f.kind, f.severity, f.action, f.message, f.code, f.pci, f.component, f.line,
                   f.line_no, f.time, f.rule, attrs)


def finding_to_json(f: Finding) -> dict[str, Any]:
    return f.to_json()


def finding_from_json(d: Any) -> Finding:
    attrs = d.get("attrs") or {}
    return Finding(
        kind=str(d["kind"]),
        severity=Severity[str(d["severity"]).upper()],
        action=Action[str(d["action"]).upper()],
        message=str(d["message"]),
        code=d.get("code") if isinstance(d.get("code"), int) else None,
        pci=d.get("pci") if isinstance(d.get("pci"), str) else None,
        component=d.get("component") if isinstance(d.get("component"), str) else None,
        line=d.get("line") if isinstance(d.get("line"), str) else None,
        line_no=d.get("line_no") if isinstance(d.get("line_no"), int) else None,
        time=datetime.fromisoformat(d["time"]) if isinstance(d.get("time"), str) else None,
        rule=d.get("rule") if isinstance(d.get("rule"), str) else None,
        attrs={str(k): v for k, v in dict(attrs).items() if isinstance(v, str | int | float | bool) or v is None},
    )

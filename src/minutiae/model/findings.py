"""Frozen records that flow through the pipeline.

``LogEvent`` is one thing a log line said (an *event*); ``Observation`` is one value a source
measured; ``Finding`` is an evaluated problem with severity and action; ``Condition`` is a lasting
state with a reason and a transition time (what the controller acts on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from minutiae.model.vocab import Action, Severity, Status

Scalar = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One kernel-log event (possibly joined from several physical lines)."""

    kind: str
    message: str
    line: str
    line_no: int
    time: datetime | None = None
    uptime_s: float | None = None
    code: int | None = None
    pci: str | None = None
    host: str | None = None
    attrs: Mapping[str, Scalar] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Observation:
    """One value a source measured. ``component`` is e.g. ``gpu:0000:44:00.0``, ``ib:mlx5_0/1``."""

    source: str
    component: str
    metric: str
    value: Scalar
    time: float | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """An evaluated problem. JSON fields per DESIGN.md: kind, code, pci, severity, action,
    message, line (plus the extras here)."""

    kind: str
    severity: Severity
    action: Action
    message: str
    code: int | None = None
    pci: str | None = None
    component: str | None = None
    line: str | None = None
    line_no: int | None = None
    time: datetime | None = None
    rule: str | None = None
    attrs: Mapping[str, Scalar] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "code": self.code,
            "pci": self.pci,
            "severity": self.severity.label,
            "action": self.action.label,
            "message": self.message,
            "line": self.line,
            "line_no": self.line_no,
            "time": self.time.isoformat() if self.time else None,
            "component": self.component,
            "rule": self.rule,
            "attrs": dict(self.attrs),
        }


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check (a group such as gpu, ib, pcie, kernel_log) on one node.

    ``status`` is UNKNOWN when the source could not be read; ``reason`` then says why.
    """

    check: str
    status: Status
    findings: tuple[Finding, ...] = ()
    reason: str | None = None
    observed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "status": self.status.label,
            "reason": self.reason,
            "observed": self.observed,
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass(frozen=True, slots=True)
class Condition:
    """A lasting state on a node: what the controller acts on (NPD-style).

    ``since`` is the transition time (epoch seconds) of the last change of ``active``.
    """

    node: str
    kind: str
    active: bool
    reason: str
    message: str
    since: float
    action: Action = Action.NONE
    severity: Severity = Severity.INFO
    evidence: tuple[str, ...] = ()

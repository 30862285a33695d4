"""Kernel-log events → findings (pure): each ``LogEvent`` gets the severity, action and message
of its rule (``kernel_log.toml``), or of its code in the XID/SXID catalog.

XID specifics (NVIDIA's catalog, see docs/rules.md):

- codes not in the catalog give a finding that says "unknown XID N" with the catalog's
  conservative ``[unknown]`` severity/action, never an error;
- ``overrides`` refine by message text (Xid 154 names the recovery action it wants; NVLink5
  Xids 144-150 say fatal / non-fatal);
- Xid 45 ("preemptive cleanup, due to previous errors") follows Xid N: the one its message
  names ("... caused by previous Xid 149", newer drivers), else the previous Xid on the same GPU
  (within :data:`FOLLOW_WINDOW_S` when both have times): same severity and action, message
  "follows Xid N"; solo it is an application-level event;
- application-caused codes (13, 31, 43, 45, 137) never need more than ``restart_app`` on their
  own, so they never drain a node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from minutiae.model.findings import Finding, LogEvent, Scalar
from minutiae.model.vocab import Action, Severity, Status
from minutiae.rules.logs import (
    CodeCatalog,
    LogRule,
    kernel_log_rules,
    sxid_catalog,
    xid_catalog,
)

FOLLOW_WINDOW_S = 300.0
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")


class _SafeDict(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


def _fmt(template: str, fields: Mapping[str, Any]) -> str:
    try:
        return template.format_map(_SafeDict(fields))
    except (ValueError, IndexError, AttributeError, TypeError):
        return template


def _component(rule: LogRule | None, pci: str | None) -> str | None:
    """``<rule's component>:<pci>`` (the rule says what the line is about, in its TOML)."""
    return f"{rule.component}:{pci}" if rule is not None and rule.component and pci else None


def _is_fatal(ev: LogEvent) -> bool | None:
    for key in ("sxid_severity", "fm_severity"):
        v = ev.attrs.get(key)
        if isinstance(v, str):
            return v.lower() == "fatal"
    return None


class LogFindingMapper:
    """Stateful across one stream of events (Xid 45 needs the previous Xid per GPU)."""

    def __init__(self, rules: Sequence[LogRule] | None = None, *, xid: CodeCatalog | None = None,
                 sxid: CodeCatalog | None = None) -> None:
        self.rules = {r.id: r for r in (kernel_log_rules() if rules is None else rules)}
        self.xid = xid or xid_catalog()
        self.sxid = sxid or sxid_catalog()
        self._last_xid: dict[str | None, tuple[int, Severity, Action, float | None]] = {}
        self._memo: dict[tuple[Any, ...], tuple[str, str | None]] = {}

    def finding(self, ev: LogEvent) -> Finding:
        rule = self.rules.get(str(ev.attrs.get("rule", "")))
        if rule is not None and rule.catalog is None:
            return self._plain(rule, ev)
        severity = rule.severity if rule else Severity.WARNING
        action = rule.action if rule else Action.NONE
        template = rule.message if rule else "{kind}: {message}"
        fields: dict[str, Any] = {**ev.attrs, "kind": ev.kind, "code": ev.code,
                                  "pci": ev.pci or "(PCI unknown)", "message": ev.message, "name": "?"}
        attrs: dict[str, Scalar] = dict(ev.attrs)
        t = ev.time.timestamp() if ev.time is not None else None
        if rule is not None and rule.catalog == "xid":
            severity, action, template = self._xid(ev, fields, attrs, template, t)
        elif rule is not None and rule.catalog == "sxid":
            severity, action, template = self._sxid(ev, fields, attrs, template)
        if ev.uptime_s is not None:
            attrs["uptime_s"] = ev.uptime_s
        if ev.host:
            attrs["host"] = ev.host
        return Finding(
            kind=ev.kind, severity=severity, action=action, message=_fmt(template, fields),
            code=ev.code, pci=ev.pci, component=_component(rule, ev.pci), line=ev.line,
            line_no=ev.line_no, time=ev.time, rule=rule.id if rule else None, attrs=attrs,
        )

    def _plain(self, rule: LogRule, ev: LogEvent) -> Finding:
        """A rule without a catalog: severity, action and message depend only on the rule and
        the message, so they are worked out once per distinct message (fleet logs repeat)."""
        key = (rule.id, ev.message, ev.pci, ev.code)
        memo = self._memo.get(key)
        if memo is None:
            fields: dict[str, Any] = {**ev.attrs, "kind": ev.kind, "code": ev.code,
                                      "pci": ev.pci or "(PCI unknown)", "message": ev.message,
                                      "name": "?"}
            memo = (_fmt(rule.message, fields), _component(rule, ev.pci))
            if len(self._memo) >= 4096:
                self._memo.clear()
            self._memo[key] = memo
        attrs: dict[str, Scalar] = dict(ev.attrs)
        if ev.uptime_s is not None:
            attrs["uptime_s"] = ev.uptime_s
        if ev.host:
            attrs["host"] = ev.host
        return Finding(kind=ev.kind, severity=rule.severity, action=rule.action, message=memo[0],
                       code=ev.code, pci=ev.pci, component=memo[1], line=ev.line,
                       line_no=ev.line_no, time=ev.time, rule=rule.id, attrs=attrs)

    def _xid(self, ev: LogEvent, fields: dict[str, Any], attrs: dict[str, Scalar],
             template: str, t: float | None) -> tuple[Severity, Action, str]:
        cat = self.xid
        entry = cat.get(ev.code)
        if entry is None:
            attrs["unknown_code"] = True
            return cat.unknown_severity, cat.unknown_action, cat.unknown_message
        fields["name"] = entry.name
        attrs["name"] = entry.name
        attrs["nvidia_action"] = entry.nvidia_action
        severity, action = entry.severity, entry.action
        for pattern, sev, act in entry.overrides:
            if pattern.search(ev.message):
                severity, action = sev, act
                break
        if entry.follows_previous:
            prev = self._last_xid.get(ev.pci)
            named = _CAUSED_BY.search(ev.message)
            if named is not None:  # newer drivers say which: "... caused by previous Xid 149"
                code = int(named.group(1))
                if prev is None or prev[0] != code:
                    cause = cat.get(code)
                    prev = (code, cause.severity, cause.action, t) if cause else (
                        code, cat.unknown_severity, cat.unknown_action, t)
            if prev is not None and (named is not None or t is None or prev[3] is None
                                     or abs(t - prev[3]) <= FOLLOW_WINDOW_S):
                code, severity, action, _ = prev
                attrs["follows"] = code
                return severity, action, template + f": follows Xid {code}"
            attrs["solo"] = True
            template += " (solo: NVIDIA's WORKFLOW_XID_45 says restart Fabric Manager)"
        if entry.app_caused and action.drains:
            action = Action.RESTART_APP
        if entry.app_caused:
            attrs["app_caused"] = True
        if not entry.follows_previous and ev.code is not None:
            self._last_xid[ev.pci] = (ev.code, severity, action, t)
        return severity, action, template

    def _sxid(self, ev: LogEvent, fields: dict[str, Any], attrs: dict[str, Scalar],
              template: str) -> tuple[Severity, Action, str]:
        cat = self.sxid
        fatal = _is_fatal(ev)
        entry = cat.get(ev.code)
        if entry is not None:
            fields["name"] = entry.name
            attrs["name"] = entry.name
            if fatal is None and ev.kind == "sxid":  # a detail line of the same SXid burst
                return Severity.INFO, Action.NONE, template + " (detail)"
            return entry.severity, entry.action, template
        attrs["unknown_code"] = True
        severity, action = cat.unknown_severity, cat.unknown_action
        if fatal and cat.fatal_severity is not None and cat.fatal_action is not None:
            severity, action = max(severity, cat.fatal_severity), max(action, cat.fatal_action)
        elif fatal is None and ev.kind == "sxid":
            severity, action = Severity.INFO, Action.NONE
        return severity, action, cat.unknown_message


def findings_from_events(events: Iterable[LogEvent], *,
                         rules: Sequence[LogRule] | None = None) -> Iterator[Finding]:
    """Map each kernel-log event to a Finding (severity, action, rule id, catalog name)."""
    mapper = LogFindingMapper(rules)
    for ev in events:
        yield mapper.finding(ev)


def nagios_status(findings: Iterable[Finding]) -> Status:
    """Exit status by the worst finding: none/info → OK, warning → WARNING, error/critical →
    CRITICAL."""
    worst = max((f.severity for f in findings), default=Severity.INFO)
    if worst >= Severity.ERROR:
        return Status.CRITICAL
    return Status.WARNING if worst is Severity.WARNING else Status.OK


@dataclass(frozen=True, slots=True)
class FindingGroup:
    """Findings with the same kind, code, device (PCI address) and rule, counted; severity and
    action are the worst of the group.

    ``first``/``last`` are the earliest/latest wall-clock times (None when the log has only
    uptimes); ``first_line_no`` is where the group starts; ``message`` is its first message,
    ``example`` its first line."""

    kind: str
    code: int | None
    pci: str | None
    severity: Severity
    action: Action
    count: int
    first: datetime | None
    last: datetime | None
    first_line_no: int | None
    message: str
    name: str | None = None
    rule: str | None = None
    example: str | None = None
    last_line_no: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "code": self.code, "pci": self.pci, "name": self.name,
            "severity": self.severity.label, "action": self.action.label, "count": self.count,
            "first": self.first.isoformat() if self.first else None,
            "last": self.last.isoformat() if self.last else None,
            "first_line_no": self.first_line_no, "last_line_no": self.last_line_no,
            "message": self.message, "rule": self.rule, "example": self.example,
        }


#: distinct groups an :class:`Aggregator` keeps; findings of further keys are only counted
MAX_GROUPS = 100_000


class Aggregator:
    """Findings folded into groups by (kind, code, device, rule) as they stream: memory is
    bounded by :data:`MAX_GROUPS` whatever the log's length (findings of keys past it are
    counted in ``overflow`` and the totals, not grouped)."""

    def __init__(self, max_groups: int = MAX_GROUPS) -> None:
        self.max_groups = max_groups
        self._groups: dict[tuple[Any, ...], list[Any]] = {}
        self.total = 0
        self.overflow = 0
        self.by_severity: dict[Severity, int] = dict.fromkeys(Severity, 0)
        self.worst_action = Action.NONE

    def add(self, f: Finding) -> None:
        self.total += 1
        self.by_severity[f.severity] += 1
        if f.action > self.worst_action:
            self.worst_action = f.action
        key = (f.kind, f.code, f.pci or f.component, f.rule)
        g = self._groups.get(key)
        t = f.time
        if g is None:
            if len(self._groups) >= self.max_groups:
                self.overflow += 1
                return
            name = f.attrs.get("name")
            self._groups[key] = [1, t, t, f.line_no, f.line_no, f.message, (f.line or "").split("\n")[0],
                                 f.severity, f.action, name if isinstance(name, str) else None]
            return
        g[0] += 1
        if t is not None:
            if g[1] is None or t < g[1]:
                g[1] = t
            if g[2] is None or t > g[2]:
                g[2] = t
        g[4] = f.line_no
        if f.severity > g[7]:
            g[7] = f.severity
        if f.action > g[8]:
            g[8] = f.action

    @property
    def worst(self) -> Severity:
        return max((s for s, n in self.by_severity.items() if n), default=Severity.INFO)

    def groups(self) -> list[FindingGroup]:
        """Worst first, then by first appearance."""
        out = [FindingGroup(kind=k[0], code=k[1], pci=k[2], severity=g[7], action=g[8], count=g[0],
                            first=g[1], last=g[2], first_line_no=g[3], last_line_no=g[4],
                            message=g[5], example=g[6], name=g[9], rule=k[3])
               for k, g in self._groups.items()]
        out.sort(key=lambda g: (-g.severity, -g.action, g.first_line_no or 0))
        return out


def summarize(findings: Iterable[Finding]) -> list[FindingGroup]:
    """Group findings (worst first, then by first appearance) — a burst of 600 Xid 13 on one
    GPU is one row with a count."""
    agg = Aggregator()
    for f in findings:
        agg.add(f)
    return agg.groups()

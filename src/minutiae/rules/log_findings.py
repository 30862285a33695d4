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
import string
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from functools import lru_cache
from typing import Any, NamedTuple

from minutiae.model.findings import Finding, LogEvent, Scalar
from minutiae.model.vocab import Action, Severity
from minutiae.rules.logs import CodeCatalog, LogRule, kernel_log_rules, sxid_catalog, xid_catalog

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


#: event fields that differ from line to line of the same message
PER_LINE_FIELDS = frozenset({"style", "level", "host", "uptime_s", "line", "line_no", "time"})


@lru_cache(maxsize=1024)
def _per_line(template: str) -> bool:
    """Whether a message template names a per-line field (then it is formatted per line)."""
    try:
        return any(f and f.split(".")[0].split("[")[0] in PER_LINE_FIELDS
                   for _, f, _, _ in string.Formatter().parse(template))
    except ValueError:
        return False  # a bad template formats to itself (_fmt), the same for every line


class Counted(Enum):
    """How a repeated message's findings can be counted (:meth:`LogFindingMapper.counted`)."""

    EVENT = "event"  # build its event and finding (provisional rule, per-line template)
    PER_MESSAGE = "per_message"  # the same plan for every line of the message
    PER_LINE = "per_line"  # a plan per line (catalog rules: Xid 45 follows the previous Xid)


class GroupPlan(NamedTuple):
    """What every finding of one repeated message counts as in an :class:`Aggregator`: the
    group key (kind, code, device, rule), severity, action, the finding's message and the
    catalog name."""

    key: tuple[Any, ...]
    severity: Severity
    action: Action
    message: str
    name: str | None


def _component(rule: LogRule | None, pci: str | None) -> str | None:
    """``<rule's component>:<pci>`` (the rule says what the line is about, in its TOML)."""
    return f"{rule.component}:{pci}" if rule is not None and rule.component and pci else None


def _is_fatal(attrs: Mapping[str, Scalar]) -> bool | None:
    for key in ("sxid_severity", "fm_severity"):
        v = attrs.get(key)
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
        #: a catalog rule's message → its plan and the Xid it leaves as the GPU's last (if any)
        self._plans: dict[tuple[Any, ...], tuple[GroupPlan, tuple[Any, ...] | None]] = {}

    def finding(self, ev: LogEvent) -> Finding:
        rule = self.rules.get(str(ev.attrs.get("rule", "")))
        if rule is not None and rule.catalog is None:
            return self._plain(rule, ev)
        t = ev.time.timestamp() if ev.time is not None else None
        severity, action, message, attrs = self._judge(rule, ev.kind, ev.message, ev.code, ev.pci,
                                                       ev.attrs, t)
        if ev.uptime_s is not None:
            attrs["uptime_s"] = ev.uptime_s
        if ev.host:
            attrs["host"] = ev.host
        return Finding(
            kind=ev.kind, severity=severity, action=action, message=message,
            code=ev.code, pci=ev.pci, component=_component(rule, ev.pci), line=ev.line,
            line_no=ev.line_no, time=ev.time, rule=rule.id if rule else None, attrs=attrs,
        )

    def line_plan(self, kind: str, message: str, code: int | None, pci: str | None,
                  ev_attrs: Mapping[str, Scalar], time: datetime | None) -> GroupPlan:
        """How one event counts in an :class:`Aggregator` — what :meth:`finding` then
        :meth:`Aggregator.add` do without building the Finding (a catalog rule's verdict
        depends on the events before it: Xid 45 follows the previous Xid on its GPU)."""
        rule = self.rules.get(str(ev_attrs.get("rule", "")))
        if rule is not None and rule.catalog is None:
            text, component = self._plain_text(rule, kind, message, code, pci, ev_attrs)
            name = ev_attrs.get("name")
            return GroupPlan((kind, code, pci or component, rule.id), rule.severity, rule.action,
                             text, name if isinstance(name, str) else None)
        t = time.timestamp() if time is not None else None
        key = (rule.id if rule else None, kind, message, code, pci)
        if (known := self._plans.get(key)) is not None:  # judged before: only the Xid state
            if known[1] is not None:  # is per line (the GPU's last Xid, at this line's time)
                self._last_xid[pci] = (*known[1], t)
            return known[0]
        severity, action, text, attrs = self._judge(rule, kind, message, code, pci, ev_attrs, t)
        name = attrs.get("name")
        plan = GroupPlan((kind, code, pci or _component(rule, pci), rule.id if rule else None),
                         severity, action, text, name if isinstance(name, str) else None)
        if "follows" not in attrs and "solo" not in attrs:  # (Xid 45: by the Xid before it)
            if len(self._plans) >= 4096:
                self._plans.clear()
            xid = rule is not None and rule.catalog == "xid" and "unknown_code" not in attrs
            self._plans[key] = plan, (code, severity, action) if xid and code is not None else None
        return plan

    def _judge(self, rule: LogRule | None, kind: str, message: str, code: int | None,
               pci: str | None, ev_attrs: Mapping[str, Scalar],
               t: float | None) -> tuple[Severity, Action, str, dict[str, Scalar]]:
        """Severity, action, message and attributes of an event of a catalog rule (or of no
        known rule)."""
        severity = rule.severity if rule else Severity.WARNING
        action = rule.action if rule else Action.NONE
        template = rule.message if rule else "{kind}: {message}"
        fields: dict[str, Any] = {**ev_attrs, "kind": kind, "code": code,
                                  "pci": pci or "(PCI unknown)", "message": message, "name": "?"}
        attrs: dict[str, Scalar] = dict(ev_attrs)
        if rule is not None and rule.catalog == "xid":
            severity, action, template = self._xid(code, message, pci, fields, attrs, template, t)
        elif rule is not None and rule.catalog == "sxid":
            severity, action, template = self._sxid(kind, code, fields, attrs, template)
        return severity, action, _fmt(template, fields), attrs

    def _plain_text(self, rule: LogRule, kind: str, message: str, code: int | None,
                    pci: str | None, ev_attrs: Mapping[str, Scalar]) -> tuple[str, str | None]:
        """A rule without a catalog: its finding's message and component depend only on the
        rule and the event's message (unless the template names a per-line field), so they
        are worked out once per distinct message (fleet logs repeat)."""
        key = (rule.id, message, pci, code)
        memo = self._memo.get(key)
        if memo is None:
            fields: dict[str, Any] = {**ev_attrs, "kind": kind, "code": code,
                                      "pci": pci or "(PCI unknown)", "message": message,
                                      "name": "?"}
            memo = (_fmt(rule.message, fields), _component(rule, pci))
            if _per_line(rule.message):
                return memo
            if len(self._memo) >= 4096:
                self._memo.clear()
            self._memo[key] = memo
        return memo

    def counted(self, ev_attrs: Mapping[str, Scalar]) -> Counted:
        """How an event of this rule can be counted without building its Finding."""
        rule = self.rules.get(str(ev_attrs.get("rule", "")))
        if rule is None or rule.provisional or _per_line(rule.message):
            return Counted.EVENT
        return Counted.PER_MESSAGE if rule.catalog is None else Counted.PER_LINE

    def _plain(self, rule: LogRule, ev: LogEvent) -> Finding:
        text, component = self._plain_text(rule, ev.kind, ev.message, ev.code, ev.pci, ev.attrs)
        attrs: dict[str, Scalar] = dict(ev.attrs)
        if ev.uptime_s is not None:
            attrs["uptime_s"] = ev.uptime_s
        if ev.host:
            attrs["host"] = ev.host
        return Finding(kind=ev.kind, severity=rule.severity, action=rule.action, message=text,
                       code=ev.code, pci=ev.pci, component=component, line=ev.line,
                       line_no=ev.line_no, time=ev.time, rule=rule.id, attrs=attrs)

    def _xid(self, code: int | None, message: str, pci: str | None, fields: dict[str, Any],
             attrs: dict[str, Scalar], template: str,
             t: float | None) -> tuple[Severity, Action, str]:
        cat = self.xid
        entry = cat.get(code)
        if entry is None:
            attrs["unknown_code"] = True
            return cat.unknown_severity, cat.unknown_action, cat.unknown_message
        fields["name"] = entry.name
        attrs["name"] = entry.name
        attrs["nvidia_action"] = entry.nvidia_action
        severity, action = entry.severity, entry.action
        for pattern, sev, act in entry.overrides:
            if pattern.search(message):
                severity, action = sev, act
                break
        if entry.follows_previous:
            prev = self._last_xid.get(pci)
            named = _CAUSED_BY.search(message)
            if named is not None:  # newer drivers say which: "... caused by previous Xid 149"
                named_code = int(named.group(1))
                if prev is None or prev[0] != named_code:
                    cause = cat.get(named_code)
                    prev = (named_code, cause.severity, cause.action, t) if cause else (
                        named_code, cat.unknown_severity, cat.unknown_action, t)
            if prev is not None and (named is not None or t is None or prev[3] is None
                                     or abs(t - prev[3]) <= FOLLOW_WINDOW_S):
                prev_code, severity, action, _ = prev
                attrs["follows"] = prev_code
                return severity, action, template + f": follows Xid {prev_code}"
            attrs["solo"] = True
            template += " (solo: NVIDIA's WORKFLOW_XID_45 says restart Fabric Manager)"
        if entry.app_caused:  # never more than restart_app on its own
            attrs["app_caused"] = True
            action = Action.RESTART_APP if action.drains else action
        if not entry.follows_previous and code is not None:
            self._last_xid[pci] = (code, severity, action, t)
        return severity, action, template

    def _sxid(self, kind: str, code: int | None, fields: dict[str, Any], attrs: dict[str, Scalar],
              template: str) -> tuple[Severity, Action, str]:
        cat = self.sxid
        fatal = _is_fatal(attrs)
        entry = cat.get(code)
        if entry is not None:
            fields["name"] = entry.name
            attrs["name"] = entry.name
            if fatal is None and kind == "sxid":  # a detail line of the same SXid burst
                return Severity.INFO, Action.NONE, template + " (detail)"
            return entry.severity, entry.action, template
        attrs["unknown_code"] = True
        severity, action = cat.unknown_severity, cat.unknown_action
        if fatal and cat.fatal_severity is not None and cat.fatal_action is not None:
            severity, action = max(severity, cat.fatal_severity), max(action, cat.fatal_action)
        elif fatal is None and kind == "sxid":
            severity, action = Severity.INFO, Action.NONE
        return severity, action, cat.unknown_message


def findings_from_events(events: Iterable[LogEvent], *,
                         rules: Sequence[LogRule] | None = None) -> Iterator[Finding]:
    """Map each kernel-log event to a Finding (severity, action, rule id, catalog name)."""
    mapper = LogFindingMapper(rules)
    for ev in events:
        yield mapper.finding(ev)


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
        self.total = self.overflow = 0
        self.by_severity: dict[Severity, int] = dict.fromkeys(Severity, 0)
        self.worst_action = Action.NONE

    def add(self, f: Finding) -> None:
        name = f.attrs.get("name")
        self.add_plan(GroupPlan((f.kind, f.code, f.pci or f.component, f.rule), f.severity,
                                f.action, f.message, name if isinstance(name, str) else None),
                      f.time, f.line_no, f.line)

    def add_plan(self, plan: GroupPlan, t: datetime | None, line_no: int | None,
                 line: str | bytes | None) -> None:
        """One finding by its group plan and where it was (:meth:`add` for a Finding; an
        aggregating scan's repeats, the raw line decoded only as a group's example)."""
        g = self._groups.get(plan.key)
        if g is None:
            self._count(plan, 1)
            if len(self._groups) >= self.max_groups:
                self.overflow += 1
                return
            if isinstance(line, bytes):
                line = line.decode("utf-8", "replace")
            self._groups[plan.key] = [1, t, t, line_no, line_no, plan.message, (line or "")
                                      .split("\n")[0], plan.severity, plan.action, plan.name]
            return
        self.add_tally(plan, t, t, line_no, 1, g)

    def add_tally(self, plan: GroupPlan, lo: datetime | None, hi: datetime | None,
                  line_no: int | None, count: int, g: list[Any] | None = None) -> None:
        """``count`` more findings of a plan whose group an earlier one (same file) made: the
        earliest and latest time, the last line (an aggregating scan's repeats of a message)."""
        self._count(plan, count)
        if g is not None:  # one finding (add_plan): its line is the group's last
            g[4] = line_no
        else:
            g = self._groups.get(plan.key)
            if g is None:  # its first finding was past max_groups
                self.overflow += count
                return
            if line_no is not None and (g[4] is None or line_no > g[4]):
                g[4] = line_no
        g[0] += count
        if lo is not None and (g[1] is None or lo < g[1]):
            g[1] = lo
        if hi is not None and (g[2] is None or hi > g[2]):
            g[2] = hi
        g[7], g[8] = max(g[7], plan.severity), max(g[8], plan.action)

    def _count(self, plan: GroupPlan, count: int) -> None:
        self.total += count
        self.by_severity[plan.severity] += count
        if plan.action > self.worst_action:
            self.worst_action = plan.action

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

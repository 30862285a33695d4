"""The check engine: pure logic, state in :class:`EngineState`, time from an injected ``Clock``.

Feed it observations (counter values from the sources) and findings (from the kernel log), then
``evaluate()``: every rule (:mod:`minutiae.rules.engine.rules`) computes one value per key,
compares it with its threshold, and the debounce/hysteresis machinery (boot grace, persistence
before alarm, healthy delay before clearing, flap counting) decides whether the key is alarmed.

Typical use (one-shot, state kept in a file between runs)::

    engine = Engine(rules, clock=SystemClock(), node="gpu017", boot_time=boot, state=old_state)
    engine.observe(observations)
    engine.record(log_findings)
    result = engine.evaluate()          # EngineResult(findings=..., conditions=...)
    save(engine.state.to_json())
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from minutiae.clock import Clock, ManualClock
from minutiae.model.findings import Condition, Finding, Observation, Scalar
from minutiae.rules.engine.rules import EngineRule, Example
from minutiae.rules.engine.state import MAX_SAMPLES, EngineState, KeyState

_PCI_IN = re.compile(r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])")
_GLOB = re.compile(r"[*?\[]")
#: a boot time that moved by more than this means the node rebooted
REBOOT_TOLERANCE_S = 120.0


@dataclass(frozen=True, slots=True)
class EngineResult:
    """What one evaluation concluded.

    ``findings``: one Finding per alarmed (rule, key): kind/severity/action from the rule (the
    ``flap_*`` ones when the key is flapping, whichever is worse); ``attrs`` carry ``value`` (the
    rule's computed value: latest value, increase over the window, rate per ``per_s`` seconds,
    or count of findings in the window), ``threshold``, ``since`` and ``flapping``.
    ``conditions``: one Condition per (rule, key) that has ever alarmed, active or cleared, with
    the transition time of its last change (what the controller acts on).
    """

    findings: tuple[Finding, ...]
    conditions: tuple[Condition, ...]


def _finding_time(f: Finding, now: float) -> float:
    return f.time.timestamp() if f.time is not None else now


def _increase(samples: Sequence[tuple[float, Any]]) -> tuple[float, float] | None:
    """(increase, elapsed seconds) of a cumulative counter; a drop counts as a reset to 0."""
    pts = [(t, float(v)) for t, v in samples
           if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(pts) < 2:
        return None
    inc = 0.0
    for (_, a), (_, b) in zip(pts, pts[1:], strict=False):
        inc += b - a if b >= a else b
    return inc, pts[-1][0] - pts[0][0]


class Engine:
    """Stateful evaluator of engine rules for one node (see the module docstring)."""

    def __init__(self, rules: Sequence[EngineRule], *, clock: Clock, node: str = "localhost",
                 boot_time: float | None = None, state: EngineState | None = None) -> None:
        self.rules = tuple(rules)
        self.clock = clock
        self.node = node
        self.state = state if state is not None else EngineState()
        old = self.state.boot_time
        if boot_time is not None:
            if old is not None and abs(old - boot_time) > REBOOT_TOLERANCE_S:
                for r in self.rules:  # counts of log findings are "since boot"
                    if r.on == "finding":
                        self.state.rules.pop(r.id, None)
            self.state.boot_time = boot_time
        known = {r.id for r in self.rules}
        for rid in list(self.state.rules):  # a rule removed from the catalog leaves no state
            if rid not in known:
                del self.state.rules[rid]

    # -- input --------------------------------------------------------------------------------
    def _in_grace(self, rule: EngineRule, t: float, uptime: float | None = None) -> bool:
        if rule.boot_grace_s <= 0:
            return False
        if uptime is None:
            if self.state.boot_time is None:
                return False
            uptime = t - self.state.boot_time
        return uptime < rule.boot_grace_s

    def observe(self, observations: Iterable[Observation]) -> None:
        """Store the values the observation rules watch (time = observation time or now)."""
        now = self.clock.now()
        rules = [r for r in self.rules if r.on == "observation"]
        for o in observations:
            for r in rules:
                if not (fnmatchcase(o.metric, r.metric) and fnmatchcase(o.source, r.source)
                        and fnmatchcase(o.component, r.component)):
                    continue
                t = o.time if o.time is not None else now
                if self._in_grace(r, t):
                    continue
                # a rule over several metrics (a glob) keeps one series per metric
                key = o.component if not _GLOB.search(r.metric) else f"{o.component}|{o.metric}"
                ks = self.state.key(r.id, key)
                ks.samples.append((t, o.value))
                ks.samples.sort(key=lambda s: s[0])
                if r.type == "onsets":  # only the changes matter: keep the state small
                    ks.samples = _changes(ks.samples)
                m = _PCI_IN.search(o.component)
                ks.pci = m.group(1).lower() if m else ks.pci

    def note(self, rule_id: str, key: str, evidence: str) -> None:
        """Attach evidence (a line, a rule's message) to a key of an observation rule: it is
        the ``line`` of the key's finding and its condition's evidence while it lasts."""
        ks = self.state.key(rule_id, key)
        if not ks.evidence or ks.evidence[-1] != evidence:
            ks.evidence = [*ks.evidence, evidence][-5:]

    def record(self, findings: Iterable[Finding]) -> None:
        """Count the findings the finding rules watch."""
        now = self.clock.now()
        rules = [r for r in self.rules if r.on == "finding"]
        for f in findings:
            for r in rules:
                if not fnmatchcase(f.kind, r.match_kind):
                    continue
                if r.match_codes and f.code not in r.match_codes:
                    continue
                if not fnmatchcase(f.rule or "", r.match_rule):
                    continue
                up = f.attrs.get("uptime_s")
                t = _finding_time(f, now)
                if f.time is None and isinstance(up, int | float) and self.state.boot_time is not None:
                    t = self.state.boot_time + float(up)  # dmesg/kmsg: uptime since this boot
                if self._in_grace(r, t, up if isinstance(up, int | float) else None):
                    continue
                if r.group_by == "pci":
                    key = f.pci or "unknown"
                elif r.group_by == "node":
                    key = self.node
                else:
                    key = f.component or (f"gpu:{f.pci}" if f.pci else self.node)
                ks = self.state.key(r.id, key)
                ks.samples.append((t, 1))
                ks.pci = f.pci or ks.pci
                ks.evidence = [*ks.evidence, f.line or f.message][-5:]

    # -- evaluation ---------------------------------------------------------------------------
    def _prune(self, r: EngineRule, ks: KeyState, now: float) -> None:
        s = ks.samples
        if r.type == "threshold":
            del s[:-1]
        elif r.window_s > 0:
            start = now - r.window_s
            first = next((i for i, (t, _) in enumerate(s) if t >= start), len(s))
            if r.type in ("rate", "delta", "onsets"):
                first = max(first - 1, 0)  # keep one baseline sample before the window
            del s[:first]
        del s[:-MAX_SAMPLES]

    def _value(self, r: EngineRule, ks: KeyState, now: float) -> Any:
        if r.type == "threshold":
            return ks.samples[-1][1] if ks.samples else None
        if r.type == "count":
            start = now - r.window_s if r.window_s > 0 else float("-inf")
            return sum(1 for t, _ in ks.samples if t >= start)
        if r.type == "onsets":
            if not ks.samples:
                return None
            start = now - r.window_s
            s = ks.samples
            return sum(1 for (_, a), (t, b) in zip(s, s[1:], strict=False)
                       if t >= start and _true(b) and not _true(a))
        inc = _increase(ks.samples)
        if inc is None:
            return None
        increase, elapsed = inc
        if r.type == "delta":
            return increase
        return increase / elapsed * r.per_s if elapsed > 0 else None

    def _step(self, r: EngineRule, ks: KeyState, bad: bool, now: float) -> None:
        if r.max_gap_s > 0 and ks.seen is not None and now - ks.seen > r.max_gap_s:
            ks.bad_since = ks.good_since = None  # not seen in between: start the stretch again
        ks.seen = now
        if bad:
            ks.good_since = None
            if ks.bad_since is None:
                ks.bad_since = now
            if not ks.active and now - ks.bad_since >= r.for_s:
                ks.active, ks.since = True, now
                ks.transitions.append(now)
        else:
            ks.bad_since = None
            if ks.good_since is None:
                ks.good_since = now
            if ks.active and now - ks.good_since >= r.clear_after_s:
                ks.active, ks.since = False, now
                ks.transitions.append(now)
        ks.transitions = [t for t in ks.transitions if t >= now - r.flap_window_s][-64:]

    def flapping(self, r: EngineRule, ks: KeyState) -> bool:
        return r.flap_transitions >= 2 and len(ks.transitions) >= r.flap_transitions

    def evaluate(self) -> EngineResult:
        """Advance every rule's state to ``clock.now()`` and report alarms and conditions."""
        now = self.clock.now()
        findings: list[Finding] = []
        conditions: list[Condition] = []
        for r in self.rules:
            for key, ks in sorted(self.state.rules.get(r.id, {}).items()):
                self._prune(r, ks, now)
                value = self._value(r, ks, now)
                if value is not None:
                    ks.value = value
                    self._step(r, ks, r.compare(value), now)
                flapping = self.flapping(r, ks)
                if not ks.active and not flapping and ks.since is None:
                    continue
                sev, act = r.severity, r.action
                if flapping:
                    sev = max(sev, r.flap_severity or sev)
                    act = max(act, r.flap_action or act)
                message = _format(r, key, ks.value, flapping)
                if ks.active or flapping:
                    attrs: dict[str, Scalar] = {
                        "value": _scalar(ks.value), "threshold": r.threshold,
                        "since": ks.since, "flapping": flapping, "window_s": r.window_s,
                    }
                    findings.append(Finding(
                        kind=r.kind, severity=sev, action=act, message=message, pci=ks.pci,
                        component=key, rule=r.id, attrs=attrs,
                        line=ks.evidence[-1] if ks.evidence else None,
                    ))
                conditions.append(Condition(
                    node=self.node, kind=r.kind, active=ks.active or flapping,
                    reason=r.reason + ("Flapping" if flapping else ""), message=message,
                    since=ks.since if ks.since is not None else now, action=act, severity=sev,
                    evidence=tuple(ks.evidence),
                ))
        return EngineResult(tuple(findings), tuple(conditions))


def _true(v: Any) -> bool:
    return isinstance(v, int | float) and bool(v)


def _changes(samples: list[tuple[float, Any]]) -> list[tuple[float, Any]]:
    """The samples where the truth of the value changed (the first one is the baseline)."""
    out = samples[:1]
    for t, v in samples[1:]:
        if _true(v) != _true(out[-1][1]):
            out.append((t, v))
    return out


def _scalar(v: Any) -> Scalar:
    return v if isinstance(v, str | int | float | bool) or v is None else str(v)


def _format(r: EngineRule, key: str, value: Any, flapping: bool) -> str:
    fields = {"kind": r.kind, "component": key, "value": value, "threshold": r.threshold,
              "window_s": r.window_s, "per_s": r.per_s, "rule": r.id}
    try:
        text = r.message.format(**fields)
    except (KeyError, ValueError, IndexError, TypeError):
        text = f"{r.kind} on {key}: {value} ({r.op} {r.threshold})"
    return text + (" (flapping)" if flapping else "")


def run_example(rule: EngineRule, example: Example, start: float = 1_700_000_000.0) -> tuple[bool, bool]:
    """Feed a rule's example through a fresh engine, evaluating after every sample; returns
    (alarmed, flapping) for the example's component after the last sample."""
    clock = ManualClock(start)
    boot = start + example.boot_at if example.boot_at is not None else None
    eng = Engine([rule], clock=clock, node="example", boot_time=boot)
    comp = example.component
    pattern = rule.component if rule.on == "observation" else "*"
    if not fnmatchcase(comp, pattern):
        comp = pattern.replace("*", "example")
    for t, value in example.samples:
        clock.t = start + t
        if rule.on == "observation":
            eng.observe([Observation(
                source=rule.source if "*" not in rule.source else "example", component=comp,
                metric=rule.metric if "*" not in rule.metric else "example", value=value,
                time=clock.t)])
        else:
            eng.record([Finding(kind=rule.match_kind if "*" not in rule.match_kind else rule.kind,
                                severity=rule.severity, action=rule.action, message="example",
                                code=rule.match_codes[0] if rule.match_codes else None,
                                component=comp,
                                rule=rule.match_rule.replace("*", "") or None)])
        eng.evaluate()
    keys = eng.state.rules.get(rule.id, {})
    ks = next(iter(keys.values()), None)  # one component per example
    if ks is None:
        return False, False
    return ks.active, eng.flapping(rule, ks)

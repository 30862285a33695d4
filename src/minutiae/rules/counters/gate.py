"""Counter rules over time: their verdicts go through the check engine (pure).

A counter rule (:mod:`minutiae.rules.counters.model`) says whether its condition holds *now* on a
component. A rule with a ``gate`` (``for_s``, ``clear_after_s`` or ``type = "flap"``) does not
alarm on that alone: each cycle its verdict, 1 or 0, is fed to :class:`~minutiae.rules.engine.engine.
Engine` as one observation (source ``counters``, metric = the rule id, component = the
component), and the engine, the one place that knows about windows and stretches of time,
decides whether the component is alarmed:

- persistence / healthy delay: an engine ``threshold`` rule (verdict ``>= 1``) with the
  counter rule's ``for_s`` and ``clear_after_s``;
- flapping: an engine ``onsets`` rule: how many times the verdict turned true within
  ``window_s``, compared with ``count``.

Both carry ``max_gap_s`` = max(2 × for_s, 2 × clear_after_s, 15 min): a component not judged for
longer than that starts its stretch again, so two sightings a day apart are never "held for
5 minutes". The engine's state (``EngineState.to_dict()``) is what ``CheckMemory.gates`` keeps
in the state file between one-shot runs. Components absent from a cycle (a source that failed)
keep their state untouched and unreported for up to :data:`ABSENT_TTL_S`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from minutiae.clock import ManualClock
from minutiae.model import Finding, Observation
from minutiae.model.findings import Scalar
from minutiae.rules.counters.model import Context, CounterRule, Previous, Verdict, judge
from minutiae.rules.engine.engine import Engine
from minutiae.rules.engine.rules import EngineRule
from minutiae.rules.engine.state import EngineState, KeyState

#: the ``source`` of the verdict observations fed to the engine
SOURCE = "counters"
#: a gate's stretch restarts after a gap of at least this long without a verdict
MIN_GAP_S = 900.0
#: state of a component that has had no verdict for this long is dropped
ABSENT_TTL_S = 24 * 3600.0
#: the agent's check interval (its default): a replay's "previous check" is at most this long ago
AGENT_INTERVAL_S = 10.0


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """What the gated rules concluded this cycle.

    ``findings``: one per alarmed (rule, component), from the counter rule (kind, severity,
    action, message); ``attrs`` add ``since`` (when the alarm started), ``for_s`` /
    ``clear_after_s``, ``holding`` (whether the condition holds at this sample: false while a
    cleared condition waits out its healthy delay) and, for flap rules, ``count`` (how often
    the condition started within ``window_s``). ``pending``: one line per rule whose condition
    holds somewhere but has not yet held for ``for_s`` (not an alarm: a note).
    ``state``: the engine state to keep for the next cycle."""

    findings: tuple[Finding, ...]
    pending: tuple[str, ...]
    state: EngineState


def engine_rule(rule: CounterRule) -> EngineRule:
    """The engine rule that gates ``rule``'s verdicts (``rule.gate`` must be set)."""
    g = rule.gate
    assert g is not None
    return EngineRule(
        id=rule.id, kind=rule.kind, on="observation", type="onsets" if g.flap else "threshold",
        op=">=", threshold=g.count if g.flap else 1, severity=rule.severity, action=rule.action,
        message=rule.message, reason="".join(p.capitalize() for p in rule.id.replace("-", ".").split(".")),
        metric=rule.id, source=SOURCE, window_s=g.window_s, for_s=g.for_s,
        clear_after_s=g.clear_after_s, max_gap_s=max(2 * g.for_s, 2 * g.clear_after_s, MIN_GAP_S),
    )


def _window(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds % 60 == 0 else f"{seconds:g} s"


def gated_findings(rules: Sequence[CounterRule], verdicts: Sequence[Verdict], now: float,
                   state: EngineState | None = None, node: str = "localhost") -> GateOutcome:
    """Feed this cycle's verdicts of the gated ``rules`` to the engine (state from the previous
    cycle, or fresh) and report what is alarmed. Verdicts of ungated rules are ignored."""
    gated = {r.id: r for r in rules if r.gate is not None}
    flaps = {r.id for r in gated.values() if r.gate is not None and r.gate.flap}
    state = state if state is not None else EngineState()
    mine = [v for v in verdicts if v.rule.id in gated]
    present = {(v.rule.id, v.component) for v in mine}
    absent: dict[tuple[str, str], KeyState] = {}
    for rid in gated:  # components without a verdict this cycle: frozen, not judged
        keys = state.rules.get(rid, {})
        for key in [k for k in keys if (rid, k) not in present]:
            ks = keys.pop(key)
            if ks.seen is not None and now - ks.seen <= ABSENT_TTL_S:
                absent[(rid, key)] = ks
    engine = Engine([engine_rule(r) for r in gated.values()], clock=ManualClock(now), node=node, state=state)
    engine.observe([Observation(SOURCE, v.component, v.rule.id, int(v.holds), now) for v in mine])
    current: dict[tuple[str, str], Verdict] = {}
    for v in mine:
        current[(v.rule.id, v.component)] = v
        if v.holds and v.rule.id not in flaps:  # a flap alarm's message is built from its count
            engine.note(v.rule.id, v.component, v.finding().message)
    result = engine.evaluate()
    findings = [_finding(gated[f.rule or ""], f, current.get((f.rule or "", f.component or "")))
                for f in result.findings if f.rule in gated]
    pending = _pending(gated, current, engine.state, now)
    for (rid, key), ks in absent.items():
        engine.state.rules.setdefault(rid, {})[key] = ks
    return GateOutcome(tuple(findings), tuple(pending), engine.state)


def _finding(rule: CounterRule, alarm: Finding, verdict: Verdict | None) -> Finding:
    g = rule.gate
    assert g is not None
    comp = alarm.component or "node"
    facts: dict[str, Scalar] = dict(verdict.facts) if verdict is not None else {}
    holding = verdict is not None and verdict.holds
    if g.flap:
        facts.update(count=alarm.attrs.get("value"), window=_window(g.window_s))
        base = Verdict(rule, comp, True, facts).finding()
        message = base.message
    else:
        base = Verdict(rule, comp, True, facts).finding()
        # a condition that is gone but whose healthy delay is not over: the last message seen
        message = base.message if holding else (alarm.line or base.message)
    attrs = dict(base.attrs)
    attrs.update(since=alarm.attrs.get("since"), holding=holding, for_s=g.for_s,
                 clear_after_s=g.clear_after_s)
    if g.flap:
        attrs.update(flapping=True, window_s=g.window_s)
    return Finding(kind=rule.kind, severity=rule.severity, action=rule.action, message=message,
                   pci=base.pci, component=comp, rule=rule.id, attrs=attrs)


def _pending(gated: Mapping[str, CounterRule], current: Mapping[tuple[str, str], Verdict],
             state: EngineState, now: float) -> list[str]:
    lines: list[str] = []
    for rid, rule in gated.items():
        g = rule.gate
        if g is None or g.flap or g.for_s <= 0:
            continue
        waiting = [(key, ks) for key, ks in sorted(state.rules.get(rid, {}).items())
                   if not ks.active and ks.bad_since is not None
                   and (rid, key) in current and current[(rid, key)].holds]
        if not waiting:
            continue
        held = max(now - ks.bad_since for _, ks in waiting if ks.bad_since is not None)
        first = current[(rid, waiting[0][0])].finding().message
        more = f" (+{len(waiting) - 1} more)" if len(waiting) > 1 else ""
        lines.append(f"pending {rid}: {first}{more}: held {held:.0f} s, alarms once held "
                     f"{g.for_s:g} s")
    return lines


class GateReplay:
    """The gated rules of a replayed history (the simulator's eval, the controller's backtest)
    concluded as the agent concludes them: through :func:`gated_findings`, state carried.

    The agent judges every component every 10 s; a replay judges only when values change. So
    :meth:`check` returns, with the alarms, the times at which the caller must judge again with
    the same values (``changed=False``): when a persistence, flap window or healthy delay can
    end, and, while something is alarmed, at least every ``KEEP_S`` (a gap longer than the
    engine's ``max_gap_s`` would restart the stretch). Between holds the engine is not
    consulted (it could only say "no"); when a condition starts after such a pause, the engine
    is first shown a quiet check ``AGENT_INTERVAL_S`` earlier, so that it is seen as a start
    (an onset), as the agent sees it. ``end``: when the replayed history ends (no re-check
    after it)."""

    #: while alarmed, judge again at least this often (half the shortest ``max_gap_s``)
    KEEP_S = MIN_GAP_S / 2

    def __init__(self, rules: Sequence[CounterRule], node: str = "localhost",
                 end: float = float("inf")) -> None:
        self.gated = tuple(r for r in rules if r.gate is not None)
        self.node = node
        self.end = end      # the history ends here: no re-check after it
        self.waits = sorted({w for r in self.gated if r.gate is not None
                             for w in (r.gate.for_s, r.gate.clear_after_s, r.gate.window_s) if w > 0})
        self.waits_max = max(self.waits, default=0.0)
        self.state: EngineState | None = None
        self.alarmed = False
        self.last_hold: float | None = None
        self.prev_t: float | None = None
        self.pending: set[float] = set()
        self.holding: set[tuple[str, str]] = set()

    def check(self, verdicts: Sequence[Verdict], t: float, changed: bool = True
              ) -> tuple[list[Finding], list[float]]:
        """This check's verdicts of the gated rules (every component they apply to) at ``t``:
        the alarmed findings, and the new times to judge again at."""
        found: list[Finding] = []
        new: list[float] = []
        self.pending = {x for x in self.pending if x > t}
        if self.gated:
            holds = any(v.holds for v in verdicts)
            idle = not self.alarmed and (self.last_hold is None or t - self.last_hold > self.waits_max + 1.0)
            if holds and idle and self.prev_t is not None:
                quiet = [replace(v, holds=False) for v in verdicts]
                qt = max(self.prev_t, t - AGENT_INTERVAL_S)
                self.state = gated_findings(self.gated, quiet, qt, self.state, self.node).state
            if holds:
                self.last_hold = t
            if self.alarmed or (self.last_hold is not None and t - self.last_hold <= self.waits_max + 1.0):
                was = self.alarmed
                gate = gated_findings(self.gated, verdicts, t, self.state, self.node)
                self.state = gate.state
                self.alarmed = bool(gate.findings)
                found = list(gate.findings)
                # a condition started or stopped (a new value, or a boot grace that ended)
                holding = {(v.rule.id, v.component) for v in verdicts if v.holds}
                if holding != self.holding or changed and (holds or was or self.alarmed):
                    new = [t + w + 1.0 for w in self.waits]
                self.holding = holding
                if self.alarmed and not any(x <= t + self.KEEP_S for x in (*self.pending, *new)):
                    new.append(t + self.KEEP_S)
                new = [x for x in new if x not in self.pending and x <= self.end]
                self.pending.update(new)
        self.prev_t = t
        return found, new


def run_sequence(rule: CounterRule, steps: Sequence[tuple[float, Mapping[str, Scalar]]],
                 peers: Sequence[Mapping[str, Scalar]] = (), start: float = 1_000_000.0) -> bool:
    """Run a gated rule's time-sequence example: ``steps`` are ``(t, values)`` of one component
    at one check each (t in seconds after ``start``; the previous step's numbers are the
    baseline for rates); returns whether the component is alarmed after the last step."""
    comp = "node" if rule.component == "node" else f"{rule.component}:example"
    state: EngineState | None = None
    previous: dict[tuple[str, str], tuple[float, float]] = {}
    out = None
    for t, values in steps:
        now = start + t
        ctx_values: dict[str, Mapping[str, Scalar]] = {comp: values}
        for j, peer in enumerate(peers):
            ctx_values[f"{rule.component}:peer{j}"] = peer
        prev: Previous = dict(previous)
        out = gated_findings([rule], judge([rule], Context(ctx_values, prev, now)), now, state)
        state = out.state
        previous = {(comp, m): (float(v), now) for m, v in values.items()
                    if isinstance(v, int | float) and not isinstance(v, bool)}
    return out is not None and any(f.component == comp for f in out.findings)

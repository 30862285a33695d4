"""``minutiae backtest``: replay a history through a policy with the real, pure reconcile step.

The replay walks from the history's start to its end in steps of ``step_s`` seconds (the time
comes from a ``ManualClock``; nothing reads the real clock). At every step it applies the history
events due (reports, maintenance, jobs), runs :func:`minutiae.controller.reconcile.reconcile`
on the fleet, records the decisions and lets an obedient scheduler carry them out (drains make
nodes drained-by-us, resumes make them available), exactly as the controller's service loop
would with a backend that never fails. The scheduler never drains anything on its own.

The result (:class:`Replay`) says what the policy would have drained, resumed, escalated and
held back (and by which budget check), per rule and per node, and which rules drained the same
node again and again (repeat-rule storms). With ground truth (simulated histories) it is scored
by :mod:`minutiae.scoring.score`: right/wrong/missed drains, false-alarm causes (planned reboots,
application XIDs...), detection latency, and which missed faults the budget held back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from minutiae.backtest.history import EventKind, History, NodeEvent
from minutiae.backtest.read import RECORDED
from minutiae.clock import Clock, ManualClock
from minutiae.controller.policy import Policy, RuleDo
from minutiae.controller.reconcile import reconcile
from minutiae.controller.state import (
    ControllerMemory,
    Decision,
    FleetState,
    NodeView,
    Plan,
    Report,
    Verb,
)
from minutiae.model import Severity, Status
from minutiae.schedulers.base import NodeSchedState, NodeState
from minutiae.scoring.score import Detection, Scorecard, ScoreParams, score

DETECTOR = "backtest"


@dataclass(frozen=True, slots=True)
class Drain:
    """One drain the policy made: ``kind``/``code`` of the finding behind it (for scoring)."""

    node: str
    time: float
    rule: str
    kind: str
    code: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class RuleStats:
    """Per policy rule: drains, distinct nodes drained, new holds (the budget, pause, breaker or
    lemon said no), and ``repeat_nodes``: nodes this rule drained more than once."""

    rule: str
    drains: int
    nodes: int
    holds: int
    repeat_nodes: int


@dataclass(frozen=True, slots=True)
class Replay:
    """What one policy would have done over a history.

    ``decisions``: every decision except repeated holds; ``held_steps``: per node, the number of
    steps a wanted action stayed held (× ``step_s`` = time held back); ``alerts``: (time, text)
    of storm-breaker trips; ``score``: the scorecard against ground truth (None without truth);
    ``held_missed``: ids of faults that needed a drain, got none, and were held by the budget.
    """

    policy: str
    history: str
    step_s: float
    steps: int
    decisions: tuple[Decision, ...]
    drains: tuple[Drain, ...]
    held_steps: Mapping[str, int]
    alerts: tuple[tuple[float, str], ...]
    score: Scorecard | None = None
    held_missed: tuple[str, ...] = ()
    suppressed: int = 0
    maintenance_windows: int = 0
    by_hold_check: Mapping[str, int] = field(default_factory=dict)
    wrong_causes: Mapping[str, int] = field(default_factory=dict)

    def count(self, verb: Verb) -> int:
        return sum(1 for d in self.decisions if d.action is verb)

    def rules(self) -> list[RuleStats]:
        drains: Counter[str] = Counter()
        holds: Counter[str] = Counter()
        per_node: dict[str, Counter[str]] = {}
        for d in self.decisions:
            if d.action is Verb.DRAIN:
                drains[d.rule] += 1
                per_node.setdefault(d.rule, Counter())[d.node] += 1
            elif d.action is Verb.HOLD:
                holds[d.rule] += 1
        return [RuleStats(r, drains[r], len(per_node.get(r, {})), holds[r],
                          sum(1 for c in per_node.get(r, Counter()).values() if c > 1))
                for r in sorted(set(drains) | set(holds))]


def _finding_for(view: NodeView, rule: str, policy: Policy) -> tuple[str, int | None]:
    """The kind/code behind a drain: the worst finding of the node matching the decision's rule."""
    base = rule.split("+", 1)[0]
    best = None
    for f in view.report.findings if view.report is not None else ():
        r = policy.rule_for(f)
        if r is not None and r.name == base and (best is None or f.action > best.action):
            best = f
    return (best.kind, best.code) if best is not None else (rule, None)


def _policy_view(report: Report | None, policy: Policy) -> Report | None:
    """The report as the policy sees it: findings no rule drains on cannot change a decision
    (reconcile reads findings only to find drain rules; a healthy report's findings are never
    used), so a report holding only such findings is replayed without them. That lets reconcile
    take its fast path for the many nodes that carry harmless warnings (application XIDs,
    peermem noise...) and makes the replay of a large fleet fast, with identical decisions."""
    if report is None or not report.findings or report.status is Status.UNKNOWN:
        return report
    for f in report.findings:
        r = policy.rule_for(f)
        if r is not None and r.do is RuleDo.DRAIN:
            return report
    return Report(report.node, report.time, report.status, (), report.unknown)


@dataclass
class _Run:
    """What a replay accumulates step by step."""

    views: dict[str, NodeView]
    memory: ControllerMemory = field(default_factory=ControllerMemory)
    decisions: list[Decision] = field(default_factory=list)
    drains: list[Drain] = field(default_factory=list)
    held: Counter[str] = field(default_factory=Counter)
    hold_checks: Counter[str] = field(default_factory=Counter)
    alerts: list[tuple[float, str]] = field(default_factory=list)


def replay(history: History, policy: Policy, *, step_s: float = 60.0, scheduler: str = "slurm",
           clock: Clock | None = None, fast: bool = True) -> Replay:
    """Replay ``history`` through ``policy`` (see the module docstring).

    ``fast`` (default) skips steps in which nothing can change (no event due, nothing
    remembered, not paused) and hides findings no rule drains on (:func:`_policy_view`); the
    decisions are the same as with ``fast=False``, which runs reconcile on every step with the
    full reports (a test checks this)."""
    clk = clock or ManualClock(history.start)
    now = clk.now()
    # A recorded history starts when its recorder did: a node joins the replay at its first
    # report (the live controller could not count it as silent before then unless its scheduler
    # listed it, which a recording does not say). A simulated fleet is known from the start, so
    # a node that has not reported yet is silent, as a Slurm controller would count it.
    # A node with damage (a recorded fleet.csv node that never reports) is known from the start
    # too: it is UNKNOWN, silent, and the budget counts it.
    known_upfront = history.layout != RECORDED
    damaged = {d.node for d in history.damage if d.node is not None}
    run = _Run({n: NodeView(n, None, NodeState(n, NodeSchedState.AVAILABLE), history.domains.get(n, {}))
                for n in history.nodes if known_upfront or n in damaged})
    events = history.events
    i = 0
    steps = 0
    while now <= history.end:
        due = i < len(events) and events[i].time <= now
        if fast and not due and not run.memory.nodes and run.memory.pause is None:
            # nothing changed and nobody is remembered: reconcile would decide nothing (every
            # node is clean or out of our hands); jump to the next event
            if i >= len(events):
                break
            now = _advance(clk, now, max(1, int((events[i].time - now) // step_s)) * step_s)
            continue
        while i < len(events) and events[i].time <= now:
            _apply_event(run, events[i], history, policy, fast)
            i += 1
        plan = reconcile(FleetState(run.views, run.memory, scheduler), policy, now)
        _apply_plan(run, plan, policy, now)
        steps += 1
        now = _advance(clk, now, step_s)
    result = Replay(policy.source, history.source, step_s, steps, tuple(run.decisions), tuple(run.drains),
                    dict(run.held), tuple(run.alerts), suppressed=history.suppressed,
                    maintenance_windows=len(history.maintenance), by_hold_check=dict(run.hold_checks))
    if history.truth:
        result = scored(result, history)
    return result


def _advance(clk: Clock, now: float, seconds: float) -> float:
    """The replay's time ``seconds`` later (its own clock moves; an injected one is not touched)."""
    if isinstance(clk, ManualClock):
        clk.advance(seconds)
        return clk.now()
    return now + seconds  # pragma: no cover - replay always runs on a ManualClock unless one is injected


def _apply_event(run: _Run, ev: NodeEvent, history: History, policy: Policy, fast: bool) -> None:
    """One history event onto the node views (a report, its jobs, planned maintenance)."""
    v = run.views.get(ev.node)
    if v is None:
        v = run.views[ev.node] = NodeView(ev.node, None, NodeState(ev.node, NodeSchedState.AVAILABLE),
                                          history.domains.get(ev.node, {}))
    sched = v.sched or NodeState(ev.node, NodeSchedState.AVAILABLE)
    if ev.kind is EventKind.REPORT:
        run.views[ev.node] = replace(v, report=_policy_view(ev.report, policy) if fast else ev.report)
    elif ev.kind is EventKind.JOBS:
        run.views[ev.node] = replace(v, sched=replace(sched, jobs=ev.jobs))
    elif ev.kind is EventKind.DOWN and sched.state is NodeSchedState.AVAILABLE:
        run.views[ev.node] = replace(v, sched=NodeState(ev.node, NodeSchedState.DOWN,
                                                        reason="planned maintenance", jobs=sched.jobs))
    elif ev.kind is EventKind.UP and sched.state is NodeSchedState.DOWN and not sched.ours:
        run.views[ev.node] = replace(v, sched=NodeState(ev.node, NodeSchedState.AVAILABLE, jobs=sched.jobs))


def _apply_plan(run: _Run, plan: Plan, policy: Policy, now: float) -> None:
    """A step's plan: its decisions recorded, its drains and resumes applied to the views."""
    for text in plan.alerts:
        run.alerts.append((now, text))
    for d in plan.decisions:
        v = run.views[d.node]
        if d.action is Verb.HOLD:
            run.held[d.node] += 1
            if d.new:
                run.decisions.append(d)
                run.hold_checks[d.budget.check.split(":", 1)[0]] += 1
            continue
        run.decisions.append(d)
        jobs = v.sched.jobs if v.sched is not None else ()
        if d.action is Verb.DRAIN:
            kind, code = _finding_for(v, d.rule, policy)
            run.drains.append(Drain(d.node, now, d.rule, kind, code, d.reason))
            run.views[d.node] = replace(v, sched=NodeState(d.node, NodeSchedState.DRAINED,
                                                           reason=d.reason, ours=True, jobs=jobs))
        elif d.action is Verb.RESUME:
            run.views[d.node] = replace(v, sched=NodeState(d.node, NodeSchedState.AVAILABLE, jobs=jobs))
    run.memory = plan.memory


def detections(drains: Sequence[Drain]) -> list[Detection]:
    return [Detection(DETECTOR, d.node, d.time, d.kind, Severity.CRITICAL, drain=True, code=d.code,
                      reason=d.reason) for d in drains]


def scored(result: Replay, history: History) -> Replay:
    """``result`` with its scorecard and the missed faults the budget held back."""
    node_days = len(history.nodes) * (history.end - history.start) / 86400.0
    params = ScoreParams(gpus_per_node=history.gpus_per_node)
    card = score(history.truth, detections(result.drains), node_days, params, DETECTOR)
    drained_at: dict[str, list[float]] = {}
    for dr in result.drains:
        drained_at.setdefault(dr.node, []).append(dr.time)
    held_at: dict[str, list[float]] = {}
    for d in result.decisions:
        if d.action is Verb.HOLD and d.wanted is Verb.DRAIN:
            held_at.setdefault(d.node, []).append(d.time)
    causes: Counter[str] = Counter()
    for dr in result.drains:
        cands = [t for t in history.truth if t.covers(dr.node)
                 and t.start - params.slack_s <= dr.time <= t.end + params.grace_s]
        if any(t.harmful and t.expect_drain for t in cands):
            continue
        # the wrong drain's cause: what the truth says happened there (a planned reboot, an
        # application XID, a fault that does not need a drain ...), or nothing at all
        named = sorted((not t.harmful, t.end - t.start, t.cls) for t in cands if t.node is not None)
        causes[named[0][2] if named else "none"] += 1
    held_missed = []
    for t in history.truth:
        if not (t.harmful and t.expect_drain and t.node):
            continue
        lo, hi = t.start - params.slack_s, t.end + params.grace_s
        if any(lo <= x <= hi for x in drained_at.get(t.node, ())):
            continue
        if any(lo <= x <= hi for x in held_at.get(t.node, ())):
            held_missed.append(t.id)
    return replace(result, score=card, held_missed=tuple(held_missed),
                   wrong_causes=dict(sorted(causes.items())))


def summary(r: Replay) -> dict[str, Any]:
    """The replay's headline numbers (also the JSON ``summary``)."""
    out: dict[str, Any] = {
        "steps": r.steps, "step_s": r.step_s,
        "drains": r.count(Verb.DRAIN), "nodes_drained": len({d.node for d in r.drains}),
        "resumes": r.count(Verb.RESUME), "escalations": r.count(Verb.ESCALATE),
        "holds": r.count(Verb.HOLD), "held_node_hours": round(sum(r.held_steps.values()) * r.step_s / 3600, 2),
        "holds_by_check": dict(sorted(r.by_hold_check.items())),
        "storm_alerts": len(r.alerts),
        "maintenance_windows": r.maintenance_windows,
        "maintenance_findings_suppressed": r.suppressed,
    }
    if r.score is not None:
        s = r.score
        out.update({
            "right_drains": s.drains.right, "wrong_drains": s.drains.wrong,
            "missed_drains": s.drains.missed, "missed_held_by_budget": len(r.held_missed),
            "wrong_drain_causes": dict(r.wrong_causes),
            "gpu_hours_saved": round(s.gpu_hours.saved, 1),
        })
    return out

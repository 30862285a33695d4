"""The reconcile step: ``reconcile(fleet, policy, now) -> Plan``. Pure and fast.

No I/O, no clock (``now`` is passed), no backend: it reads reports, scheduler states and the
controller's memory and returns decisions plus the next memory. The service executes the plan
(audit first, then the backend); the backtest replays history through it with a FakeClock.

Per node (health from :func:`assess`):
- UNHEALTHY and available → DRAIN (through the safety budget; else HOLD), starting the
  escalation ladder at the rung the findings need (a lemon goes straight to ``inspect``);
- UNHEALTHY and drained by us → ESCALATE when the rung timed out or the findings need more;
- HEALTHY and drained by us → RESUME after ``healthy_delay_s`` of clean reports (a lemon, or
  a drain a human made through minutiae, is HELD for a human);
- UNKNOWN → nothing, and the healthy delay restarts (UNKNOWN is not OK);
- drained or down by someone else → never touched;
- drained by us, seen so, and now available → a human resumed it: RESOLVE (its current findings
  are acknowledged; only new evidence drains it again), never fought.
The storm breaker and the pause switch turn every wanted action into a HOLD.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from minutiae.controller.budget import (
    BudgetLedger,
    BudgetVerdict,
    NodeFacts,
    check_drain,
    storm_tripped,
    take_token,
)
from minutiae.controller.evidence import acknowledge, evidence_line, fingerprint
from minutiae.controller.policy import Policy, RuleDo
from minutiae.controller.state import (
    EMPTY_MEMORY,
    ControllerMemory,
    Decision,
    FleetState,
    Health,
    NodeMemory,
    NodeView,
    Pause,
    Plan,
    Report,
    Verb,
    undo_command,
)
from minutiae.model import Action, Finding, Status
from minutiae.schedulers.base import NodeSchedState, make_reason

_DAY = 86400.0


@dataclass(frozen=True, slots=True)
class Assessment:
    """How the policy reads one report: ``health``; for UNHEALTHY the ``rule`` that decided,
    the rung ``step`` needed and the ``evidence`` lines; for UNKNOWN ``evidence`` says why."""

    health: Health
    rule: str = ""
    step: Action | None = None
    evidence: tuple[str, ...] = ()
    summary: str = ""


def assess(report: Report | None, policy: Policy, now: float,
           acked: frozenset[str] = frozenset()) -> Assessment:
    """The report's health; findings whose :func:`fingerprint` is in ``acked`` (a human's
    ``resolve``) do not count."""
    if report is None:
        return Assessment(Health.UNKNOWN, evidence=("no report received",))
    age = now - report.time
    if age > policy.stale_after_s:
        return Assessment(Health.UNKNOWN, evidence=(
            f"last report {age:.0f}s old (stale after {policy.stale_after_s:g}s)",))
    best: tuple[Action, str, Finding] | None = None
    lines: list[str] = []
    for f in report.findings:
        if acked and fingerprint(f) in acked:
            continue
        rule = policy.rule_for(f)
        if rule is None or rule.do is not RuleDo.DRAIN:
            continue
        step = rule.step if rule.step is not None else max(f.action, Action.RESET_GPU)
        lines.append(evidence_line(f))
        if best is None or step > best[0]:
            best = (step, rule.name, f)
    if best is not None:
        f = best[2]
        summary = f.kind if f.code is None else f"{f.kind} {f.code}"
        return Assessment(Health.UNHEALTHY, rule=best[1], step=best[0], evidence=tuple(lines),
                          summary=summary)
    if report.status is Status.UNKNOWN:
        return Assessment(Health.UNKNOWN, evidence=report.unknown or ("checks could not run",))
    return Assessment(Health.HEALTHY)


def silent(v: NodeView, policy: Policy, now: float) -> bool:
    """No fresh report: the agent never reported or its last report is stale."""
    return v.report is None or now - v.report.time > policy.stale_after_s


def _facts(v: NodeView, policy: Policy, now: float) -> NodeFacts:
    jobs = v.sched.jobs if v.sched is not None else ()
    unavailable = v.unavailable
    return NodeFacts(v.name, unavailable, v.domains, jobs,
                     silent=not unavailable and silent(v, policy, now))


#: a node that wants a drain: (priority key, view, assessment, memory)
_DrainWant = tuple[tuple[int, float, str], NodeView, Assessment, NodeMemory]
#: a node that wants something else: (verb, view, rule, evidence, rung, memory)
_OtherWant = tuple[Verb, NodeView, str, tuple[str, ...], Action | None, NodeMemory]


@dataclass(slots=True)
class _Step:
    """One reconcile step's working state: what it read, and what it collects."""

    fleet: FleetState
    policy: Policy
    now: float
    mem_nodes: dict[str, NodeMemory]
    lemon_window: float
    decisions: list[Decision] = field(default_factory=list)
    drain_wants: list[_DrainWant] = field(default_factory=list)
    other_wants: list[_OtherWant] = field(default_factory=list)
    unhealthy_times: list[float] = field(default_factory=list)

    def store(self, name: str, m: NodeMemory) -> None:
        _store(self.mem_nodes, name, m, self.now, self.lemon_window)

    def undo(self, verb: Verb, node: str, reason: str = "") -> str:
        return undo_command(self.fleet.scheduler, verb, node, reason)


def reconcile(fleet: FleetState, policy: Policy, now: float) -> Plan:
    """One pure reconcile step (see the module docstring): read every node's health and what
    it wants, arm the pause or the storm breaker, then decide the drains (through the safety
    budget, most urgent first) and the other actions (token buckets)."""
    mem_in = fleet.memory
    st = _Step(fleet, policy, now, dict(mem_in.nodes), policy.lemon.days * _DAY)
    for name, v in fleet.nodes.items():
        _want(st, name, v)
    pause, alerts = _pause_or_storm(st)
    stop: BudgetVerdict | None = None
    if pause is not None:
        check = "storm" if pause.by == "breaker" else "paused"
        stop = BudgetVerdict(False, check, pause.reason)
    ledger: BudgetLedger | None = None
    if st.drain_wants and stop is None:
        ledger = BudgetLedger.build((_facts(v, policy, now) for v in fleet.nodes.values()),
                                    mem_in.buckets)
    buckets_ledger = ledger or BudgetLedger(0, 0, Counter(), Counter(), dict(mem_in.buckets))
    for _key, v, a, m in sorted(st.drain_wants, key=lambda t: t[0]):
        _decide_drain(st, v, a, m, stop, ledger)
    for want in st.other_wants:
        _decide_other(st, want, stop, buckets_ledger)
    memory = ControllerMemory(nodes=st.mem_nodes, buckets=buckets_ledger.buckets, pause=pause,
                              breaker_since=mem_in.breaker_since)
    return Plan(tuple(st.decisions), memory, tuple(alerts), policy.dry_run)


def _quiet(m: NodeMemory | None, v: NodeView, policy: Policy, now: float) -> bool:
    """The fast path: a clean, fresh, available node the controller remembers nothing about
    but (maybe) its drain history."""
    rep = v.report
    return ((m is None or (m.drained_at is None and m.unhealthy_since is None
                           and m.healthy_since is None and m.last_hold is None and not m.lemon))
            and rep is not None and not rep.findings and rep.status is not Status.UNKNOWN
            and v.sched is not None and v.sched.state is NodeSchedState.AVAILABLE
            and now - rep.time <= policy.stale_after_s)


def _want(st: _Step, name: str, v: NodeView) -> None:
    """Step 1, per node: its health, the memory that follows, and what it wants."""
    m = st.mem_nodes.get(name)
    if _quiet(m, v, st.policy, st.now):
        return
    m = m or EMPTY_MEMORY
    if m.seen_drained and v.sched is not None and v.sched.state is NodeSchedState.AVAILABLE:
        m = _human_resumed(st, v, m)
    a = assess(v.report, st.policy, st.now, m.acked)
    if a.health is Health.UNHEALTHY:
        m = _want_unhealthy(st, name, v, a, m)
    elif a.health is Health.HEALTHY:
        m = _want_healthy(st, v, m)
    else:  # UNKNOWN is not OK: the healthy delay starts over
        m = replace(m, healthy_since=None)
    st.store(name, m)


def _human_resumed(st: _Step, v: NodeView, m: NodeMemory) -> NodeMemory:
    """Our drain, seen in the scheduler, is gone and we did not resume it: a human did (an
    admin's ``scontrol resume``). Honoured as a resolve, audited as such."""
    m, lines = acknowledge(m, v.report)
    m = replace(m, seen_drained=False, drained_at=None, step=None, step_since=None,
                healthy_since=None, unhealthy_since=None, last_hold=None, lemon=False, held=None)
    st.decisions.append(Decision(
        v.name, Verb.RESOLVE, "admin-resume",
        ("resumed outside minutiae (the scheduler shows it available): honoured as a resolve; "
         "its current findings are acknowledged, new evidence drains it again", *lines),
        BudgetVerdict(True, "human", "a human returned the node to service"),
        st.undo(Verb.RESOLVE, v.name), st.now))
    return m


def _want_unhealthy(st: _Step, name: str, v: NodeView, a: Assessment,
                    m: NodeMemory) -> NodeMemory:
    """An unhealthy node: available → wants a drain; drained by us → maybe the next rung."""
    now, policy, sched = st.now, st.policy, v.sched
    if m.unhealthy_since is None:
        m = replace(m, unhealthy_since=now)
    m = replace(m, healthy_since=None)
    st.unhealthy_times.append(m.unhealthy_since if m.unhealthy_since is not None else now)
    if sched is None:
        return m
    if sched.state is NodeSchedState.AVAILABLE:
        assert a.step is not None
        key = (-int(a.step), m.unhealthy_since or now, name)
        st.drain_wants.append((key, v, a, m))
    elif v.ours:
        m = replace(m, seen_drained=True)
        if m.drained_at is None:
            m = replace(m, drained_at=now, step=a.step, step_since=now)
        cur = m.step or Action.RESET_GPU
        idx = policy.ladder_index(cur)
        rung = policy.ladder[idx]
        target: Action | None = None
        why = ""
        if a.step is not None and a.step > cur:
            target = policy.ladder[policy.ladder_index(a.step)].step
            why = f"findings now need {a.step.label}"
        elif (rung.timeout_s is not None and idx + 1 < len(policy.ladder)
              and now - (m.step_since or now) >= rung.timeout_s):
            target = policy.ladder[idx + 1].step
            why = f"still unhealthy {now - (m.step_since or now):.0f}s after {cur.label}"
        if target is not None and target != cur:
            st.other_wants.append((Verb.ESCALATE, v, "ladder", (why, *a.evidence), target, m))
    return m


def _want_healthy(st: _Step, v: NodeView, m: NodeMemory) -> NodeMemory:
    """A healthy node: drained by us → resume after the healthy delay (a lemon is held)."""
    now, policy, sched = st.now, st.policy, v.sched
    m = replace(m, unhealthy_since=None)
    if v.ours:
        hs = m.healthy_since if m.healthy_since is not None else now
        m = replace(m, healthy_since=hs, seen_drained=True)
        if m.held:
            st.other_wants.append((Verb.HOLD, v, "held", (
                f"drained by {m.held}; only a resolve returns it",), None, m))
        elif m.lemon:
            st.other_wants.append((Verb.HOLD, v, "lemon", (
                f"lemon node: {len(m.drains)} drains within {policy.lemon.days:g} days; "
                "needs hardware inspection and a human to resume",), Action.INSPECT, m))
        elif now - hs >= policy.healthy_delay_s:
            st.other_wants.append((Verb.RESUME, v, "healthy-delay", (
                f"healthy for {now - hs:.0f}s (delay {policy.healthy_delay_s:g}s)",),
                None, m))
    elif sched is not None and sched.state is NodeSchedState.AVAILABLE:
        # back in service (by us or by a human): the lemon verdict is re-made at the
        # next drain from the drain history, which is kept
        m = replace(m, healthy_since=None, drained_at=None, step=None, step_since=None,
                    last_hold=None, lemon=False, held=None)
    return m


def _pause_or_storm(st: _Step) -> tuple[Pause | None, list[str]]:
    """Step 2: the pause in force, a human's or the storm breaker's (tripped now: an alert)."""
    mem_in, alerts = st.fleet.memory, []
    pause = mem_in.pause
    if pause is None:
        armed = mem_in.breaker_since
        times = (st.unhealthy_times if armed is None
                 else [t for t in st.unhealthy_times if t >= armed])
        storm = storm_tripped(times, len(st.fleet.nodes), st.policy.budget.storm, st.now)
        if storm is not None:
            pause = Pause(storm, st.now, "breaker")
            alerts.append(storm)
    return pause, alerts


def _decide_drain(st: _Step, v: NodeView, a: Assessment, m: NodeMemory,
                  stop: BudgetVerdict | None, ledger: BudgetLedger | None) -> None:
    """Step 3, per node wanting a drain: DRAIN through the budget (a lemon starts at the
    last rung), else HOLD."""
    now, policy = st.now, st.policy
    recent = tuple(t for t in m.drains if t >= now - st.lemon_window)
    lemon = len(recent) + 1 >= policy.lemon.drains
    step = Action.INSPECT if lemon else a.step
    assert step is not None
    first = policy.ladder[policy.ladder_index(step)].step
    evidence = a.evidence
    rule = a.rule
    if lemon:
        rule = f"{a.rule}+lemon"
        evidence = (*evidence, f"lemon: {len(recent) + 1} drains within "
                    f"{policy.lemon.days:g} days, straight to {first.label}")
    reason = make_reason(f"{rule} {a.summary} step={first.label}", st.fleet.owner)
    if stop is not None:
        verdict = stop
    else:
        assert ledger is not None
        verdict = check_drain(ledger, policy.budget, _facts(v, policy, now), now,
                              st.fleet.job_tolerance)
    if verdict.allowed:
        m = replace(m, drained_at=now, step=first, step_since=now, drains=(*recent, now),
                    lemon=lemon, last_hold=None, healthy_since=None)
        st.decisions.append(Decision(v.name, Verb.DRAIN, rule, evidence, verdict,
                                     st.undo(Verb.DRAIN, v.name), now,
                                     step=first, reason=reason))
    else:
        new = m.last_hold != verdict.check
        m = replace(m, last_hold=verdict.check)
        st.decisions.append(Decision(v.name, Verb.HOLD, rule, evidence, verdict,
                                     st.undo(Verb.HOLD, v.name), now,
                                     step=first, reason=reason, wanted=Verb.DRAIN, new=new))
    st.store(v.name, m)


def _decide_other(st: _Step, want: _OtherWant, stop: BudgetVerdict | None,
                  buckets: BudgetLedger) -> None:
    """Step 4, per node wanting a resume, an escalation or a lemon hold: through the token
    buckets (a lemon waits for a human, said once)."""
    verb, v, rule, evidence, step, m = want
    now = st.now
    if verb is Verb.HOLD:  # a lemon or a human's drain waiting for a human: said once
        verdict = BudgetVerdict(False, rule, evidence[0])
        wanted: Verb | None = Verb.RESUME
    elif stop is not None:
        verdict, wanted = stop, verb
    else:
        verdict = take_token(buckets, st.policy.budget, verb.value, now)
        wanted = verb
    if verdict.allowed:
        if verb is Verb.ESCALATE:
            m = replace(m, step=step, step_since=now, last_hold=None)
        else:
            m = replace(m, healthy_since=None, drained_at=None, step=None, step_since=None,
                        last_hold=None, unhealthy_since=None, seen_drained=False)
        reason = (v.sched.reason or "") if v.sched is not None else ""
        st.decisions.append(Decision(v.name, verb, rule, evidence, verdict,
                                     st.undo(verb, v.name, reason), now, step=step))
    else:
        new = m.last_hold != verdict.check
        m = replace(m, last_hold=verdict.check)
        st.decisions.append(Decision(v.name, Verb.HOLD, rule, evidence, verdict,
                                     st.undo(Verb.HOLD, v.name), now,
                                     step=step, wanted=wanted, new=new))
    st.store(v.name, m)


def _store(mem: dict[str, NodeMemory], name: str, m: NodeMemory, now: float,
           lemon_window: float) -> None:
    drains = tuple(t for t in m.drains if t >= now - lemon_window)
    if drains != m.drains:
        m = replace(m, drains=drains)
    if m == EMPTY_MEMORY:
        mem.pop(name, None)
    else:
        mem[name] = m


def simulate(fleet: FleetState, plan: Plan) -> FleetState:
    """The fleet after ``plan`` took effect on an obedient scheduler (for backtests and
    dry-run previews): drains make nodes DRAINED and ours, resumes make them AVAILABLE."""
    from minutiae.schedulers.base import NodeState

    if not any(d.action in (Verb.DRAIN, Verb.RESUME) for d in plan.decisions):
        return replace(fleet, memory=plan.memory)
    nodes: dict[str, NodeView] = dict(fleet.nodes)
    for d in plan.decisions:
        v = nodes.get(d.node)
        if v is None:
            continue
        jobs = v.sched.jobs if v.sched is not None else ()
        if d.action is Verb.DRAIN:
            nodes[d.node] = replace(v, sched=NodeState(d.node, NodeSchedState.DRAINED,
                                                       reason=d.reason, ours=True, jobs=jobs,
                                                       owner=fleet.owner))
        elif d.action is Verb.RESUME:
            nodes[d.node] = replace(v, sched=NodeState(d.node, NodeSchedState.AVAILABLE,
                                                       jobs=jobs))
    return replace(fleet, nodes=nodes, memory=plan.memory)


def with_pause(memory: ControllerMemory, pause: Pause | None, now: float) -> ControllerMemory:
    """Memory with the pause switch set (a human's ``pause``) or cleared (``unpause``, which
    also re-arms the storm breaker: only nodes turning unhealthy from ``now`` on count)."""
    if pause is None:
        return replace(memory, pause=None, breaker_since=now)
    return replace(memory, pause=pause)


def nodes_mapping(views: list[NodeView]) -> Mapping[str, NodeView]:
    return {v.name: v for v in views}

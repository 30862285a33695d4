"""The pure reconcile step with RecordingBackend + FakeClock: drain, hold, ladder, healthy delay,
lemons, ownership, pause, storm breaker, and a week of 1,024 nodes replayed quickly."""

from __future__ import annotations

from dataclasses import replace

from minutiae.controller.policy import load_policy
from minutiae.controller.reconcile import reconcile, simulate, with_pause
from minutiae.controller.state import FleetState, NodeView, Pause, Report, Verb
from minutiae.model import Action, Finding, Severity, Status
from minutiae.schedulers.base import NodeSchedState, NodeState
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

POLICY = replace(load_policy(), healthy_delay_s=600)
XID79 = Finding("xid", Severity.CRITICAL, Action.REBOOT, "GPU has fallen off the bus", code=79,
                pci="0000:3b:00.0",
                line="NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                     "GPU has fallen off the bus.")
XID13 = Finding("xid", Severity.ERROR, Action.RESTART_APP, "graphics engine exception", code=13)
DBE = Finding("ecc_dbe", Severity.CRITICAL, Action.RESET_GPU, "volatile DBE 2", component="gpu:1")
NVL = Finding("nvlink_down", Severity.ERROR, Action.RESET_GPU, "link 3 down", component="gpu:0")


class World:
    """A recording scheduler, a fake clock and the latest reports: drives reconcile like the
    service does (plan -> backend) so tests assert on what the scheduler saw."""

    def __init__(self, n: int = 40, racks: int = 8) -> None:
        self.clock = FakeClock()
        self.backend = RecordingBackend(name="slurm")
        self.domains = {}
        for i in range(n):
            name = f"gpu{i + 1:03d}"
            self.backend.add_node(name)
            self.domains[name] = {"rack": f"r{i % racks}", "nvl_domain": f"nvl{i}"}
        self.findings: dict[str, tuple[Finding, ...]] = {}
        self.unknown: set[str] = set()
        self.fleet = FleetState(nodes={})
        self.plans = []

    def step(self, seconds: float = 10.0, policy=POLICY):
        self.clock.advance(seconds)
        now = self.clock.now()
        nodes = {}
        for name, st in self.backend.nodes.items():
            status = Status.UNKNOWN if name in self.unknown else Status.OK
            rep = Report(name, now, status, self.findings.get(name, ()))
            nodes[name] = NodeView(name, rep, st, self.domains[name])
        plan = reconcile(replace(self.fleet, nodes=nodes), policy, now)
        for d in plan.acting():
            if d.action is Verb.DRAIN:
                self.backend.drain(d.node, d.reason)
            elif d.action is Verb.RESUME:
                self.backend.resume(d.node)
        self.fleet = replace(self.fleet, memory=plan.memory)
        self.plans.append(plan)
        return plan

    def calls(self, op):
        return [c.node for c in self.backend.calls if c.op == op]


def test_critical_finding_drains_once_with_evidence_rule_and_undo():
    w = World()
    w.findings["gpu005"] = (XID79, XID13)
    plan = w.step()
    [d] = plan.decisions
    assert (d.node, d.action, d.rule, d.step) == ("gpu005", Verb.DRAIN, "needs-remediation",
                                                  Action.REBOOT)
    assert d.evidence == ("[critical/reboot] xid 79 0000:3b:00.0: " + XID79.line,)
    assert d.undo == "minutiae resolve gpu005 --now --reason 'fixed: <what was done>'"
    assert d.reason == "minutiae[default/controller]: needs-remediation xid 79 step=reboot"
    assert d.budget.allowed and d.budget.check == "ok"
    assert w.backend.nodes["gpu005"].reason == d.reason
    for _ in range(5):
        assert not [x for x in w.step().decisions if x.action is Verb.DRAIN]
    assert w.calls("drain") == ["gpu005"]


def test_application_xid_alone_never_drains():
    w = World()
    w.findings["gpu002"] = (XID13,)
    assert not w.step().decisions
    assert w.calls("drain") == []


def test_resume_only_after_healthy_delay_and_unknown_restarts_it():
    w = World()
    w.findings["gpu003"] = (NVL,)
    w.step()
    del w.findings["gpu003"]
    w.step(60)                         # clean since t
    w.step(300)
    w.unknown.add("gpu003")            # checks could not run: not healthy
    w.step(300)
    w.unknown.discard("gpu003")
    assert not [d for d in w.step(100).decisions if d.action is Verb.RESUME]
    assert not [d for d in w.step(599).decisions if d.action is Verb.RESUME]
    [d] = w.step(1).decisions
    assert d.action is Verb.RESUME and d.rule == "healthy-delay"
    assert w.backend.nodes["gpu003"].state is NodeSchedState.AVAILABLE
    assert "NodeName=gpu003 State=DRAIN" in d.undo


def test_admin_drain_is_never_resumed_nor_redrained():
    w = World()
    w.backend.admin_drain("gpu007", "bad fan (ticket 1234)")
    w.findings["gpu007"] = (XID79,)
    w.step()
    del w.findings["gpu007"]
    for _ in range(10):
        w.step(600)
    assert w.calls("drain") == w.calls("resume") == []
    assert w.backend.nodes["gpu007"].reason == "bad fan (ticket 1234)"


def test_ladder_climbs_on_timeout_and_stops_at_inspect():
    w = World()
    w.findings["gpu009"] = (NVL,)
    assert w.step().decisions[0].step is Action.RESET_GPU
    assert not w.step(899).decisions
    [e1] = w.step(1).decisions
    assert (e1.action, e1.step, e1.rule) == (Verb.ESCALATE, Action.REBOOT, "ladder")
    assert e1.evidence[0] == "still unhealthy 900s after reset_gpu"
    [e2] = w.step(1800).decisions
    assert e2.step is Action.INSPECT
    assert not w.step(100_000).decisions          # inspect waits for a human
    w.findings["gpu009"] = (NVL, XID79)
    assert not w.step().decisions                 # already above what the findings need


def test_lemon_goes_to_inspect_and_is_held_for_a_human():
    w = World()
    for _k in range(3):
        w.findings["gpu004"] = (NVL,)
        d = w.step().decisions[0]
        del w.findings["gpu004"]
        w.step()
        w.step(600)  # resumes after the healthy delay
    assert d.action is Verb.DRAIN and d.step is Action.INSPECT and d.rule.endswith("+lemon")
    assert w.calls("drain") == ["gpu004"] * 3 and w.calls("resume") == ["gpu004"] * 2
    holds = [x for p in w.plans[-2:] for x in p.decisions]
    assert holds[-1].action is Verb.HOLD and holds[-1].budget.check == "lemon"
    assert w.backend.nodes["gpu004"].state is NodeSchedState.DRAINED
    # a human inspects and resumes it; a week later one drain is not a lemon any more
    w.backend.nodes["gpu004"] = NodeState("gpu004", NodeSchedState.AVAILABLE)
    w.step()
    w.step(8 * 86400)
    w.findings["gpu004"] = (NVL,)
    d = w.step().decisions[0]
    assert d.action is Verb.DRAIN and d.step is Action.RESET_GPU and "lemon" not in d.rule


def test_budget_holds_and_says_why_then_repeats_quietly():
    w = World(n=40, racks=40)             # global cap: 4 nodes
    for i in range(1, 4):
        w.findings[f"gpu{i:03d}"] = (NVL,)
    w.step()
    w.step(700)                           # past the storm window: these are not a storm
    w.findings.update({f"gpu{i:03d}": (XID79,) for i in range(10, 13)})
    plan = w.step()
    drains = [d.node for d in plan.decisions if d.action is Verb.DRAIN]
    holds = [d for d in plan.decisions if d.action is Verb.HOLD]
    assert drains == ["gpu010"] and [h.node for h in holds] == ["gpu011", "gpu012"]
    assert holds[0].budget.check == "global" and holds[0].wanted is Verb.DRAIN
    again = w.step().decisions
    assert [d.new for d in again] == [False, False]


def test_per_domain_cap_holds_second_node_of_an_nvlink_domain():
    w = World(n=20)
    for n in ("gpu001", "gpu002"):
        w.domains[n]["nvl_domain"] = "nvl-a"
        w.findings[n] = (NVL,)
    plan = w.step()
    assert [(d.node, d.action) for d in plan] == [("gpu001", Verb.DRAIN), ("gpu002", Verb.HOLD)]
    assert plan.decisions[1].budget.check == "domain:nvl_domain"


def test_job_cap_spares_a_running_job():
    w = World(n=40)
    for n in ("gpu011", "gpu012", "gpu013"):
        w.backend.nodes[n] = NodeState(n, NodeSchedState.AVAILABLE, jobs=("4242",))
        w.findings[n] = (DBE,)
    plan = w.step()
    assert [d.action for d in plan] == [Verb.DRAIN, Verb.HOLD, Verb.HOLD]
    assert plan.decisions[1].budget.detail == "job 4242 already lost 1 node(s); it survives 1"


def test_storm_of_30_percent_trips_the_breaker_and_nothing_is_drained():
    w = World(n=40)
    for i in range(1, 13):                 # 12/40 = 30 %
        w.findings[f"gpu{i:03d}"] = (XID79,)
    plan = w.step()
    assert plan.alerts and "storm breaker: 12/40 nodes (30%)" in plan.alerts[0]
    assert {d.action for d in plan} == {Verb.HOLD}
    assert all(d.budget.check == "storm" for d in plan)
    assert plan.memory.pause is not None and plan.memory.pause.by == "breaker"
    for _ in range(30):
        w.step(60)
    assert w.calls("drain") == []
    # a human unpauses: the breaker re-arms, the budget (10 % = 4) still caps the drains
    w.fleet = replace(w.fleet, memory=with_pause(w.fleet.memory, None, w.clock.now()))
    plan = w.step()
    assert len([d for d in plan if d.action is Verb.DRAIN]) == 4
    assert not plan.alerts


def test_pause_switch_holds_everything_with_the_reason():
    w = World()
    w.fleet = replace(w.fleet, memory=with_pause(w.fleet.memory,
                                                 Pause("firmware rollout", 0.0), 0.0))
    w.findings["gpu001"] = (XID79,)
    [d] = w.step().decisions
    assert d.action is Verb.HOLD and d.budget.check == "paused"
    assert d.budget.detail == "firmware rollout"


def test_stale_report_is_unknown_never_healthy():
    w = World(n=4)
    w.findings["gpu001"] = (NVL,)
    w.step()
    del w.findings["gpu001"]
    fleet = w.fleet
    now = w.clock.now() + 10_000
    views = {n: NodeView(n, Report(n, now - 5000, Status.OK), s) for n, s in w.backend.nodes.items()}
    plan = reconcile(replace(fleet, nodes=views), POLICY, now)
    assert not plan.decisions


def test_replay_of_1024_nodes_drains_and_resumes_rotating_faults():
    """The backtest replays history through reconcile: 1,024 nodes at 60 s steps for 12 hours,
    a fault moving between nodes every 90/130 minutes. Each faulty node is drained once and
    resumed after the healthy delay. (Speed is measured in bench/controller/run.py.)"""
    names = [f"n{i:04d}" for i in range(1024)]
    t0 = 1_700_000_000.0
    policy = replace(POLICY, stale_after_s=1e9)
    sched = {n: NodeState(n, NodeSchedState.AVAILABLE) for n in names}
    fleet = FleetState(nodes={n: NodeView(n, Report(n, t0, Status.OK), sched[n],
                                          {"rack": f"r{i // 16}"}) for i, n in enumerate(names)})
    drained: list[str] = []
    resumed: list[str] = []
    ever_bad: set[str] = set()
    for k in range(12 * 60):
        now = t0 + 60.0 * k
        nodes = dict(fleet.nodes)
        bad = {names[(k // 90) * 7 % 1024], names[(k // 130) * 13 % 1024]}
        ever_bad |= bad
        for n in bad | set(fleet.memory.nodes):
            nodes[n] = replace(nodes[n], report=Report(n, now, Status.OK,
                                                       (NVL,) if n in bad else ()))
        fleet = replace(fleet, nodes=nodes)
        plan = reconcile(fleet, policy, now)
        drained += [d.node for d in plan if d.action is Verb.DRAIN]
        resumed += [d.node for d in plan if d.action is Verb.RESUME]
        assert sum(1 for v in fleet.nodes.values() if v.unavailable) <= 102
        fleet = simulate(fleet, plan)
    assert sorted(drained) == sorted(ever_bad)
    assert len(set(drained)) == len(drained)
    still_bad = {names[(719 // 90) * 7 % 1024], names[(719 // 130) * 13 % 1024]}
    assert sorted(resumed) == sorted(ever_bad - still_bad)


def test_invariants_hold_on_random_fleets():
    """Property: on any fleet, reconcile never touches a drain it does not own, never acts
    while paused, and never takes the fleet or a rack past its cap, counting silent (stale)
    nodes as unavailable."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from minutiae.controller.budget import StormConfig
    from minutiae.controller.state import ControllerMemory, NodeMemory

    pol = replace(POLICY, budget=replace(POLICY.budget, storm=StormConfig(fraction=1.0),
                                         max_unavailable_fraction=0.3))
    seen = {"drain": 0, "resume": 0, "hold": 0}
    kinds = st.sampled_from([(), (NVL,), (XID79,), (XID13,), (DBE,)])
    sched = st.sampled_from(["avail"] * 8 + ["ours", "admin", "down"])
    stale_s = st.sampled_from([False] * 7 + [True])

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(st.lists(st.tuples(kinds, sched, st.integers(0, 5), stale_s), min_size=1,
                    max_size=60), st.booleans())
    def run(rows, paused):
        now = 1_700_000_000.0
        nodes = {}
        for i, (fs, sc, rack, stale) in enumerate(rows):
            n = f"n{i:03d}"
            state = {"avail": NodeState(n, NodeSchedState.AVAILABLE),
                     "ours": NodeState(n, NodeSchedState.DRAINED, "minutiae: x", True),
                     "admin": NodeState(n, NodeSchedState.DRAINED, "bad fan", False),
                     "down": NodeState(n, NodeSchedState.DOWN, "not responding", False)}[sc]
            rep = Report(n, now - (1000 if stale else 0), Status.OK, fs)
            nodes[n] = NodeView(n, rep, state, {"rack": f"r{rack}"})
        remembered = {n: NodeMemory(healthy_since=now - 1000, drained_at=now - 2000,
                                    step=Action.RESET_GPU, step_since=now - 2000)
                      for n, v in nodes.items() if v.ours}
        mem = ControllerMemory(nodes=remembered, pause=Pause("test", now) if paused else None)
        plan = reconcile(FleetState(nodes, mem), pol, now)
        acting = plan.acting()
        for d in plan:
            seen[d.action.value] = seen.get(d.action.value, 0) + 1
        if paused:
            assert acting == ()
        for d in acting:
            v = nodes[d.node]
            if d.action is Verb.RESUME:
                assert v.ours
            if d.action is Verb.DRAIN:
                assert v.sched.state is NodeSchedState.AVAILABLE
        after = simulate(FleetState(nodes, mem), plan)

        def out_or_silent(v):
            return v.unavailable or now - v.report.time > pol.stale_after_s

        before_out = sum(1 for v in nodes.values() if out_or_silent(v))
        out = sum(1 for v in after.nodes.values() if out_or_silent(v))
        limit = int(pol.budget.max_unavailable_fraction * len(nodes) + 1e-9)
        assert out <= max(limit, before_out)
        for r in range(6):
            was = sum(1 for v in nodes.values() if out_or_silent(v)
                      and v.domains["rack"] == f"r{r}")
            now_ = sum(1 for v in after.nodes.values()
                       if out_or_silent(v) and v.domains["rack"] == f"r{r}")
            assert now_ <= max(POLICY.budget.domain_caps["rack"], was)

    run()
    # the property was exercised (derandomized: the same 150 fleets every run)
    assert seen["drain"] >= 3 and seen["hold"] >= 3 and seen["resume"] >= 1, seen

"""One contract, three schedulers: the same scenarios run against the RecordingBackend fake, a
real slurmctld (fixture ``slurm_conf``; nodes gpu041-gpu064 only) and a real kube-apiserver
(fixture ``kubeconfig``; Node objects, no kubelet), driven through the controller's pure
reconcile step and safety budget, with the backend's own state read back after every step.
Backends are made through the registry (``minutiae.schedulers.make_backend``).

Every registered backend (dry-run too) has a harness in ``scheduler_harnesses.py``
(``HARNESSES``): its declared optional
capabilities (``BACKENDS[name].capabilities``) are compared with what the made backend has and
exercised against the real scheduler, and its undo hint is run against it.

Scenarios: drain on a critical finding (exact reason, ownership, idempotency), the budget holding
under a storm (global cap, storm breaker), the per-job budget (a running Slurm job / a
Kubernetes Job's pods), never undoing an admin's drain or cordon, resume after the healthy delay.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from scheduler_harnesses import ACTING, HARNESSES, NODES, T0, Harness

from minutiae.controller.policy import Policy, load_policy, loads_policy
from minutiae.controller.reconcile import reconcile
from minutiae.controller.state import ControllerMemory, FleetState, NodeView, Plan, Report, Verb
from minutiae.errors import BackendError
from minutiae.model import Action, Finding, Severity, Status
from minutiae.schedulers import (
    BACKENDS,
    NOTHING_TO_UNDO,
    Capabilities,
    capabilities_of,
    undo_hint,
)
from minutiae.schedulers.base import DEFAULT_OWNER, NodeSchedState, NodeState, make_reason

XID79 = Finding(kind="xid", severity=Severity.CRITICAL, action=Action.REBOOT, code=79,
                pci="0000:18:00.0", message="GPU has fallen off the bus",
                line="NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, "
                     "GPU has fallen off the bus.")


@pytest.fixture(params=ACTING)
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    h = HARNESSES[request.param](request)
    yield h
    h.close()


@pytest.fixture(params=list(HARNESSES))
def any_harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    h = HARNESSES[request.param](request)
    yield h
    h.close()


# -- driving reconcile against a backend --------------------------------------------------------

def read_states(h: Harness) -> dict[str, NodeState]:
    bulk = Capabilities.of(h.backend).bulk
    if bulk is not None:
        return bulk.states(NODES)
    return {n: h.backend.state(n) for n in NODES}


def step(h: Harness, policy: Policy, now: float, bad: set[str], memory: ControllerMemory) -> Plan:
    """One controller step: read the scheduler, reconcile, carry out the plan on the backend."""
    states = read_states(h)
    views = {n: NodeView(n, Report(n, now, Status.CRITICAL if n in bad else Status.OK,
                                   (XID79,) if n in bad else ()), states[n]) for n in NODES}
    plan = reconcile(FleetState(views, memory, scheduler=h.name), policy, now)
    for d in plan.decisions:
        if d.action is Verb.DRAIN:
            h.backend.drain(d.node, d.reason)
        elif d.action is Verb.RESUME:
            h.backend.resume(d.node)
    return plan


def ours(h: Harness) -> set[str]:
    return {n for n, s in read_states(h).items() if s.ours}


BUDGET_25 = """
[[rule]]
name = "needs-remediation"
min_action = "reset_gpu"
do = "drain"
examples = [{ kind = "xid", code = 79, severity = "critical", action = "reboot", expect = "drain" }]
[[ladder]]
step = "reboot"
timeout_s = 1800
[[ladder]]
step = "inspect"
[budget]
max_unavailable_fraction = 0.25
per_job_max_nodes = 1
[budget.storm]
fraction = 0.9
"""


# -- the contract -------------------------------------------------------------------------------

def test_drain_on_a_critical_finding_is_exact_and_idempotent(harness: Harness) -> None:
    policy = load_policy()
    node = NODES[0]
    plan = step(harness, policy, T0, {node}, ControllerMemory())
    [d] = plan.decisions
    assert (d.node, d.action, d.rule) == (node, Verb.DRAIN, "needs-remediation")
    st = harness.backend.state(node)
    assert st.state is NodeSchedState.DRAINED and st.ours
    # the reason carries this controller's owner tag (the audit row's reason is the same)
    assert st.reason == d.reason == make_reason(d.reason, DEFAULT_OWNER)
    assert st.reason.startswith(f"minutiae[{DEFAULT_OWNER}]: ") and st.owner == DEFAULT_OWNER
    assert ours(harness) == {node}
    # the next step does not drain again; draining again by hand changes nothing
    plan2 = step(harness, policy, T0 + 60, {node}, plan.memory)
    assert not [x for x in plan2.decisions if x.action is Verb.DRAIN]
    harness.backend.drain(node, d.reason)
    assert harness.backend.state(node) == st


def test_budget_holds_under_a_storm(harness: Harness) -> None:
    policy = loads_policy(BUDGET_25, "budget25.toml")
    bad = set(NODES[:10])
    plan = step(harness, policy, T0, bad, ControllerMemory())
    drained = {d.node for d in plan.decisions if d.action is Verb.DRAIN}
    held = [d for d in plan.decisions if d.action is Verb.HOLD]
    assert len(drained) == 6 and len(held) == 4  # 25 % of 24
    assert {d.budget.check for d in held} == {"global"}
    assert ours(harness) == drained
    plan2 = step(harness, policy, T0 + 60, bad, plan.memory)
    assert not [d for d in plan2.decisions if d.action is Verb.DRAIN]
    assert ours(harness) == drained  # never more than the cap, step after step


def test_storm_breaker_stops_everything(harness: Harness) -> None:
    plan = step(harness, load_policy(), T0, set(NODES[:10]), ControllerMemory())
    assert plan.alerts and plan.alerts[0].startswith("storm breaker: 10/24 nodes")
    assert {d.action for d in plan.decisions} == {Verb.HOLD}
    assert {d.budget.check for d in plan.decisions} == {"storm"}
    assert ours(harness) == set()


def test_per_job_budget_with_a_running_job(harness: Harness) -> None:
    job = harness.start_job(NODES[2:4])
    states = read_states(harness)
    assert states[NODES[2]].jobs == (job,) and states[NODES[3]].jobs == (job,)
    plan = step(harness, loads_policy(BUDGET_25, "budget25.toml"), T0, set(NODES[2:4]),
                ControllerMemory())
    acts = sorted((d.node, d.action, d.budget.check) for d in plan.decisions)
    assert acts == [(NODES[2], Verb.DRAIN, "ok"), (NODES[3], Verb.HOLD, "job")]
    st = harness.backend.state(NODES[2])
    # cordoned with its job still running: draining (Slurm's word), ours
    assert st.ours and st.state in (NodeSchedState.DRAINING, NodeSchedState.DRAINED)


def test_an_admins_drain_is_never_undone(harness: Harness) -> None:
    node = NODES[1]
    harness.admin_drain(node)
    before = harness.backend.state(node)
    assert before.state is NodeSchedState.DRAINED and not before.ours
    memory = ControllerMemory()
    for k in range(15):  # healthy reports for 14 minutes, then a critical one: nothing happens
        plan = step(harness, load_policy(), T0 + 60 * k, {node} if k == 14 else set(), memory)
        memory = plan.memory
        assert not [d for d in plan.decisions if d.node == node], plan.decisions
    with pytest.raises(BackendError, match="refusing to"):
        harness.backend.resume(node)
    harness.backend.drain(node, "xid 79")  # ours would overwrite it: it must not
    assert harness.backend.state(node) == before


def test_resume_only_after_the_healthy_delay(harness: Harness) -> None:
    policy = load_policy()  # healthy_delay_s = 600
    node = NODES[5]
    plan = step(harness, policy, T0, {node}, ControllerMemory())
    memory = plan.memory
    for k in range(1, 12):  # clean from +60 s: resumed once 600 s of clean reports have passed
        plan = step(harness, policy, T0 + 60 * k, set(), memory)
        memory = plan.memory
        resumed = [d for d in plan.decisions if d.action is Verb.RESUME]
        st = harness.backend.state(node)
        if k < 11:
            assert not resumed and st.ours, k
    assert [d.node for d in resumed] == [node]
    assert st.state is NodeSchedState.AVAILABLE and not st.ours
    harness.backend.resume(node)  # idempotent
    assert harness.backend.state(node).state is NodeSchedState.AVAILABLE


# -- every registered backend: declared capabilities and undo hints -----------------------------

def test_every_registered_backend_has_a_harness() -> None:
    assert set(HARNESSES) == set(BACKENDS)
    assert set(ACTING) == {n for n in BACKENDS if n != "dry-run"}


def test_declared_capabilities_are_the_real_ones(any_harness: Harness) -> None:
    be = any_harness.backend
    assert be.name == any_harness.name
    assert capabilities_of(be) == BACKENDS[any_harness.name].capabilities
    caps = Capabilities.of(be)
    single = {n: be.state(n) for n in NODES}
    if caps.bulk is not None:   # one call, the same answer as asking node by node
        assert caps.bulk.states(NODES) == single
    if caps.listing is not None:  # every node the scheduler knows, the fleet's among them
        every = caps.listing.all_states()
        assert set(NODES) <= set(every)
        assert {n: every[n] for n in NODES} == single
    if caps.tolerances is not None:  # the job's own metadata says how many nodes it may lose
        job = any_harness.start_job(NODES[6:8], tolerance=1)
        assert caps.tolerances.job_tolerances().get(job) == 1


def test_undo_hint_of_a_drain_puts_the_node_back(harness: Harness) -> None:
    node = NODES[7]
    harness.backend.drain(node, make_reason("xid 79 step=reboot"))
    assert harness.backend.state(node).ours
    hint = undo_hint(harness.name, "drain", node)
    if harness.name == "recording":
        assert hint == NOTHING_TO_UNDO
        return
    harness.run_undo(hint)  # Kubernetes: uncordon, our taint and our annotations go too
    after = harness.backend.state(node)
    assert after.state is NodeSchedState.AVAILABLE and after.owner is None and not after.ours


def test_undo_hint_of_a_resume_drains_again(harness: Harness) -> None:
    node = NODES[8]
    reason = make_reason("xid 79 step=reboot")
    harness.backend.drain(node, reason)
    harness.backend.resume(node)
    assert harness.backend.state(node).state is NodeSchedState.AVAILABLE
    hint = undo_hint(harness.name, "resume", node, reason)
    if harness.name == "recording":
        assert hint == NOTHING_TO_UNDO
        return
    harness.run_undo(hint)
    st = harness.backend.state(node)
    assert st.state is NodeSchedState.DRAINED
    if harness.name == "slurm":  # the reason goes back too, so it is ours again
        assert st.ours and st.reason == reason

"""One contract, three schedulers: the same scenarios run against the RecordingBackend fake, a
real slurmctld (fixture ``slurm_conf``; nodes gpu041-gpu064 only) and a real kube-apiserver
(fixture ``kubeconfig``; Node objects, no kubelet), driven through the controller's pure
reconcile step and safety budget, with the backend's own state read back after every step.

Scenarios: drain on a critical finding (exact reason, ownership, idempotency), the budget holding
under a storm (global cap, storm breaker), the per-job budget (a running Slurm job / a
Kubernetes Job's pods), never undoing an admin's drain or cordon, resume after the healthy delay.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Protocol

import pytest

from minutiae.controller.policy import Policy, load_policy, loads_policy
from minutiae.controller.reconcile import reconcile
from minutiae.controller.state import ControllerMemory, FleetState, NodeView, Plan, Report, Verb
from minutiae.errors import BackendError
from minutiae.model import Action, Finding, Severity, Status
from minutiae.schedulers.base import NodeSchedState, NodeState, SchedulerBackend, make_reason
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

NODES = [f"gpu{i:03d}" for i in range(41, 65)]  # the contract suite's Slurm range
T0 = 1_780_000_000.0
XID79 = Finding(kind="xid", severity=Severity.CRITICAL, action=Action.REBOOT, code=79,
                pci="0000:18:00.0", message="GPU has fallen off the bus",
                line="NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, "
                     "GPU has fallen off the bus.")
ADMIN_REASON = "admin: fan tray replaced, do not use"


class Harness(Protocol):
    name: str
    backend: SchedulerBackend

    def reset(self) -> None: ...
    def admin_drain(self, node: str) -> None: ...
    def start_job(self, nodes: list[str]) -> str: ...
    def close(self) -> None: ...


# -- the three schedulers ---------------------------------------------------------------------

class RecordingHarness:
    name = "recording"

    def __init__(self) -> None:
        self.backend = RecordingBackend()
        self.reset()

    def reset(self) -> None:
        self.backend.nodes.clear()
        for n in NODES:
            self.backend.add_node(n)

    def admin_drain(self, node: str) -> None:
        self.backend.admin_drain(node, ADMIN_REASON)

    def start_job(self, nodes: list[str]) -> str:
        for n in nodes:
            self.backend.nodes[n] = replace(self.backend.nodes[n], jobs=("77",))
        return "77"

    def close(self) -> None:
        pass


class SlurmHarness:
    name = "slurm"

    def __init__(self, conf: str) -> None:
        from minutiae.schedulers.slurm.backend import SlurmBackend

        self.conf = conf
        self.backend = SlurmBackend(slurm_conf=conf)
        self.jobs: list[str] = []
        self.reset()

    def _run(self, *argv: str) -> str:
        res = subprocess.run(list(argv), env={"SLURM_CONF": self.conf, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
                             capture_output=True, text=True, timeout=30, check=False)
        return res.stdout

    def reset(self) -> None:
        for j in self.jobs:
            self._run("scancel", j)
        self.jobs = []
        for _ in range(100):
            out = self._run("sinfo", "-h", "-N", "-n", ",".join(NODES), "-o", "%N %t")
            busy = [ln.split()[0] for ln in out.splitlines() if ln.split()[1] != "idle"]
            if not busy:
                return
            for n in busy:
                if self._run("scontrol", "show", "node", n).find("DRAIN") >= 0:
                    self._run("scontrol", "update", f"NodeName={n}", "State=RESUME")
            time.sleep(0.2)
        raise AssertionError(f"slurm nodes not idle: {busy}")

    def admin_drain(self, node: str) -> None:
        self._run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={ADMIN_REASON}")

    def start_job(self, nodes: list[str]) -> str:
        job = self._run("sbatch", "--parsable", "-N", str(len(nodes)), "-w", ",".join(nodes),
                        "-o", "/dev/null", "--wrap", "sleep 600").strip()
        self.jobs.append(job)
        for _ in range(100):
            if self._run("squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING":
                return job
            time.sleep(0.1)
        raise AssertionError(f"job {job} did not start")

    def close(self) -> None:
        self.reset()


class KubernetesHarness:
    name = "kubernetes"
    NS = "mk-contract"

    def __init__(self, kubeconfig: str) -> None:
        from k8s_helpers import admin, config, ensure_namespace
        from minutiae.schedulers.kubernetes.backend import KubernetesBackend

        self.api = admin(kubeconfig)
        ensure_namespace(self.api, self.NS)
        self.backend = KubernetesBackend(config(kubeconfig), FakeClock(start=T0))
        self.pods: list[str] = []
        self.reset()

    def reset(self) -> None:
        from k8s_helpers import create_node, delete

        for p in self.pods:
            delete(self.api, f"/api/v1/namespaces/{self.NS}/pods/{p}")
        self.pods = []
        for n in NODES:
            create_node(self.api, n)

    def admin_drain(self, node: str) -> None:
        from k8s_helpers import admin_cordon

        admin_cordon(self.api, node)

    def start_job(self, nodes: list[str]) -> str:
        from k8s_helpers import create_pod

        for i, n in enumerate(nodes):
            create_pod(self.api, self.NS, f"train-{i}", n, {"job": "train"}, job="train")
            self.pods.append(f"train-{i}")
        return f"{self.NS}/Job/train"

    def close(self) -> None:
        from k8s_helpers import delete

        self.reset()
        for n in NODES:
            delete(self.api, f"/api/v1/nodes/{n}")
        self.api.close()
        self.backend.close()


@pytest.fixture(params=["recording", "slurm", "kubernetes"])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    h: Any
    if request.param == "recording":
        h = RecordingHarness()
    elif request.param == "slurm":
        h = SlurmHarness(request.getfixturevalue("slurm_conf"))
    else:
        h = KubernetesHarness(request.getfixturevalue("kubeconfig"))
    yield h
    h.close()


# -- driving reconcile against a backend --------------------------------------------------------

def read_states(h: Harness) -> dict[str, NodeState]:
    bulk = getattr(h.backend, "states", None)
    if callable(bulk):
        got: dict[str, NodeState] = bulk(NODES)
        return got
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
    assert st.reason == make_reason(d.reason)
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

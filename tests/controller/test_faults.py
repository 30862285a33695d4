"""Issue 17's "bad input and faults": clocks that jump (controller and agent), a store that goes
away mid-transaction (real PostgreSQL: the session is ended inside the audit-before-act
transaction), a Lease that cannot be renewed (real kube-apiserver), and agents that keep
buffering while the store cannot take their reports. In each: no action without a valid
fencing token, the fault said in status/problems."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from flaky_store import FlakyStore

from minutiae.agent.push import RUN_ID, Outbox, Pusher
from minutiae.clock import SystemClock
from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.reconcile import assess
from minutiae.controller.service import Controller
from minutiae.controller.state import Health
from minutiae.controller.store import Store
from minutiae.schedulers.base import NodeSchedState
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "t0ken-for-faults-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
POLICY = replace(load_policy(), dry_run=False)
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus"}


def rep(node: str, bad: bool = False) -> dict[str, Any]:
    st = "critical" if bad else "ok"
    return {"node": node, "status": st, "domains": {"rack": f"r-{node}"},
            "checks": [{"check": "gpu", "status": st, "findings": [XID79] if bad else []}]}


def fleet(tmp_path: Path, clock: FakeClock, n: int = 12) -> tuple[Controller, RecordingBackend]:
    be = RecordingBackend(name="slurm")
    for i in range(1, n + 1):
        be.add_node(f"gpu{i:03d}")
    ctl = Controller(Store(tmp_path / "c.db"), be, POLICY, clock)
    for i in range(1, n + 1):
        ctl.ingest(rep(f"gpu{i:03d}"))
    ctl.step()
    return ctl, be


def tick(ctl: Controller, clock: FakeClock, s: float, skip: tuple[str, ...] = ()) -> None:
    """``s`` seconds pass; every node but ``skip`` reports as before; a step."""
    clock.advance(s)
    for n, r in list(ctl.intake.reports.items()):
        if n not in skip:
            ctl.ingest(rep(n, bool(r.findings)))
    ctl.step()


def test_a_backwards_jump_leaves_the_controller_neither_blind_nor_trusting_old_reports(
        tmp_path: Path) -> None:
    clock = FakeClock()
    ctl, be = fleet(tmp_path, clock)
    tick(ctl, clock, 5)
    clock._now -= 3600.0                      # NTP steps the wall clock back an hour
    ctl.ingest(rep("gpu002", bad=True))
    plan = ctl.step()
    assert plan.decisions == () and be.nodes["gpu002"].state is NodeSchedState.AVAILABLE
    problems = [w for _t, w in ctl.counters.problems]
    assert any("wall clock jumped -3600.0 s" in w for w in problems), problems
    tick(ctl, clock, 1)                       # the next step sees gpu002's (new) report
    assert be.nodes["gpu002"].state is NodeSchedState.DRAINED
    # a node that stops reporting goes stale by the new clock (ages were kept)
    for _ in range(3):
        tick(ctl, clock, 60, skip=("gpu003",))
    got = assess(ctl.intake.reports["gpu003"], POLICY, clock.now())
    assert got.health is Health.UNKNOWN


def test_a_forward_jump_restarts_the_healthy_delay_and_acts_on_nothing(tmp_path: Path) -> None:
    clock = FakeClock()
    ctl, be = fleet(tmp_path, clock)
    ctl.ingest(rep("gpu001", bad=True))
    ctl.step()
    assert be.nodes["gpu001"].state is NodeSchedState.DRAINED
    ctl.ingest(rep("gpu001"))                 # repaired: clean reports start
    for _ in range(5):
        tick(ctl, clock, 60)                  # 300 s of the 600 s healthy delay
    clock._now += 7200.0                      # the wall clock leaps two hours
    plan = ctl.step()
    assert plan.decisions == ()
    assert ctl.memory.nodes["gpu001"].healthy_since is None
    assert Store(tmp_path / "c.db").load_memory().nodes["gpu001"].healthy_since is None
    for _ in range(9):                        # 540 s of clean reports after the jump: not yet
        tick(ctl, clock, 60)
        assert be.nodes["gpu001"].state is NodeSchedState.DRAINED
    for _ in range(3):
        tick(ctl, clock, 60)
    assert be.nodes["gpu001"].state is NodeSchedState.AVAILABLE
    assert sum(1 for w in ctl.counters.problems if "jumped +7200.0 s" in w[1]) == 1


def test_the_agent_ages_a_report_by_its_monotonic_clock() -> None:
    clock = FakeClock()
    sent: list[dict[str, Any]] = []

    class T:
        def post(self, url: str, json: Any, headers: Any) -> tuple[int, Any]:
            sent.append(json)
            return 202, None

    box = Outbox()
    box.add({**rep("gpu001"), "agent": {"created": clock.now(), "mono": clock.monotonic(),
                                        "run": RUN_ID}})
    box.add({**rep("gpu001"), "agent": {"created": clock.now() - 30.0}})  # an older run's
    clock._now += 3600.0                      # the wall clock jumps; 2 s really pass
    clock.advance(2.0)
    assert not Pusher("http://ctl", TOKEN, clock, T(), retries=0).flush(box).failed
    assert [b["agent"]["age_s"] for b in sent] == [2.0, 3632.0]


def test_agents_keep_buffering_while_the_store_cannot_take_reports(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "c.db")
    ctl = Controller(store, RecordingBackend(name="slurm"), POLICY, FakeClock())
    clock = FakeClock()

    class AppTransport:
        def __init__(self, client: TestClient) -> None:
            self.client = client

        def post(self, url: str, json: Any, headers: Any) -> tuple[int, Any]:
            r = self.client.post("/v1/reports", json=json, headers=dict(headers))
            return r.status_code, r.json()

    with TestClient(make_app(ctl, TOKEN)) as client:
        pusher = Pusher("http://ctl", TOKEN, clock, AppTransport(client), retries=0)
        box = Outbox()
        store.down = True
        for i in range(3):
            box.add({**rep("gpu001"), "agent": {"created": clock.now(), "seq": i}})
            res = pusher.flush(box)
            assert res.failed and "HTTP 503" in (res.error or "")
            clock.advance(pusher.next_try - clock.now() + 0.1)
        assert len(box.items) == 3 and ctl.committer.rows == 0
        store.down = False
        res = pusher.flush(box)
        assert res.sent == 3 and not box.items
        assert [n for n, *_ in store.load_reports()] == ["gpu001"]


def test_a_store_that_goes_away_mid_transaction_leaves_nothing_done(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Real PostgreSQL: the session is terminated inside the audit-before-act transaction (after
    the audit row was written): rolled back, the scheduler untouched, the step says why; the
    next step does the drain exactly once."""
    from ha_support import fresh_schema_dsn

    import minutiae.controller.store.postgres as pg
    from minutiae.controller.ha.pg_lock import PgAdvisoryLeadership

    store = pg.PgStore(fresh_schema_dsn(), identity="ctl-a", size=2)
    clock = SystemClock()
    lead = PgAdvisoryLeadership(store, "ctl-a", clock)
    be = RecordingBackend(name="slurm")
    for i in range(1, 13):
        be.add_node(f"gpu{i:03d}")
    ctl = Controller(store, be, POLICY, clock, leadership=lead)
    for i in range(1, 13):
        ctl.ingest(rep(f"gpu{i:03d}"))
    ctl.step()
    real = pg.insert_audit

    def dies(ex: Any, *a: Any, **k: Any) -> int:
        got = real(ex, *a, **k)
        ex("SELECT pg_terminate_backend(pg_backend_pid())", ())
        return got

    monkeypatch.setattr(pg, "insert_audit", dies)
    ctl.ingest(rep("gpu004", bad=True))
    plan = ctl.step()
    assert be.calls == [] or all(c[0] != "drain" for c in be.calls)
    assert store.audit(node="gpu004") == []           # rolled back with the session
    assert any("not acting" in w for _t, w in ctl.counters.problems)
    assert not [d for d in plan.decisions if d.node == "gpu004" and d.action.value == "drain"
                and be.nodes["gpu004"].state is NodeSchedState.DRAINED]
    monkeypatch.setattr(pg, "insert_audit", real)
    for _ in range(20):                                # the store is back
        ctl.step()
        if be.nodes["gpu004"].state is NodeSchedState.DRAINED:
            break
        time.sleep(0.2)
    assert be.nodes["gpu004"].state is NodeSchedState.DRAINED
    assert [(a.action, a.status) for a in store.audit(node="gpu004")] == [("drain", "done")]
    lead.release()


@pytest.mark.k8s
def test_a_lease_that_cannot_be_renewed_stops_the_leader_and_says_why(kubeconfig: str) -> None:
    from minutiae.controller.ha.k8s_lease import KubeLeaseLeadership
    from minutiae.schedulers.kubernetes.config import KubeConfig, load_kubeconfig
    from minutiae.schedulers.kubernetes.http import KubeClient

    client = KubeClient(load_kubeconfig(kubeconfig))
    name = "minutiae-test-" + uuid.uuid4().hex[:8]
    a = KubeLeaseLeadership(client, "ctl-a", SystemClock(), name=name, lease_s=2.0)
    try:
        assert a.acquire() and a.fence() == 1
        a.client = KubeClient(KubeConfig(server="https://127.0.0.1:1", verify=False),
                              timeout=0.5)           # the API server is cut off
        t0 = time.monotonic()
        while a.fence() is not None:
            a.acquire()
            assert time.monotonic() - t0 < 3.0
            time.sleep(0.1)
        assert time.monotonic() - t0 <= 1.5           # stops at lease_s / 2, before any takeover
        st = a.status()
        assert st.role.value == "standby" and st.detail and "cannot reach" in st.detail
    finally:
        client.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}",
                       ok=(200, 202, 404))

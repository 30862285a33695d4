"""High availability on the real PostgreSQL: two controller processes (tests/controller/
ha_replica.py) on one store, one scheduler journal. kill -9 of the leader between its audit
insert and its scheduler call, and SIGSTOP of the leader (a partition) then SIGCONT: the
standby takes over within 15 s, every action is done exactly once (0 double, 0 lost), and the
old leader never acts again (its epoch is refused in the insert's own transaction)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from ha_support import fresh_schema_dsn

from minutiae.clock import SystemClock
from minutiae.controller.ha.pg_lock import PgAdvisoryLeadership
from minutiae.controller.state import ControllerMemory
from minutiae.controller.store.postgres import PgStore
from minutiae.errors import StoreError

HERE = Path(__file__).resolve().parent
T = TypeVar("T")
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus",
         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                 "GPU has fallen off the bus."}


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 20.0) -> T:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = fn()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Cluster:
    def __init__(self, dsn: str, d: Path, nodes: int = 40,
                 env: dict[str, str] | None = None) -> None:
        self.dsn, self.dir, self.nodes = dsn, d, nodes
        #: for every replica (HA_LEASE / HA_KUBECONFIG: elect by a Kubernetes Lease)
        self.env = {**os.environ, **(env or {})}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        PgStore(dsn, identity="setup", size=1).close()  # the schema, before two race for it
        for i in range(1, nodes + 1):   # a healthy fleet: the budget lets one node in 10 go
            self.report(f"gpu{i:03d}", critical=False)

    def start(self, me: str) -> None:
        log = open(self.dir / f"{me}.log", "wb")  # noqa: SIM115 - the process keeps it
        self.procs[me] = subprocess.Popen(
            [sys.executable, str(HERE / "ha_replica.py"), self.dsn, me, str(self.dir),
             str(self.nodes)], stdout=log, stderr=subprocess.STDOUT, env=self.env)

    def status(self, me: str) -> dict[str, Any] | None:
        try:
            got: dict[str, Any] = json.loads((self.dir / f"status-{me}.json").read_text())
        except (OSError, ValueError):
            return None
        return got

    def leader(self) -> tuple[int, str] | None:
        with psycopg.connect(self.dsn) as c:
            row = c.execute("SELECT epoch, holder FROM leader WHERE id=1").fetchone()
        return (int(row[0]), str(row[1])) if row else None

    def report(self, node: str, critical: bool = True) -> None:
        """A report (critical: an Xid 79), as another replica's ingest would have stored it."""
        status = "critical" if critical else "ok"
        body = {"node": node, "status": status,
                "checks": [{"check": "gpu", "status": status,
                            "findings": [XID79] if critical else []}],
                "domains": {"rack": f"r-{node}"}}
        with psycopg.connect(self.dsn) as c:
            c.execute("INSERT INTO nodes(node, received, report, domains, writer) "
                      "VALUES(%s, %s, %s, '{}', 'agents') ON CONFLICT(node) DO UPDATE SET "
                      "received=excluded.received, report=excluded.report, "
                      "seq=nextval('nodes_seq'), writer='agents'",
                      (node, time.time(), json.dumps(body)))

    def audit(self, node: str) -> list[tuple[str, str, int | None]]:
        with psycopg.connect(self.dsn) as c:
            return [(r[0], r[1], r[2]) for r in c.execute(
                "SELECT action, status, epoch FROM audit WHERE node=%s AND action <> 'hold' "
                "ORDER BY id", (node,))]

    def journal(self, node: str | None = None) -> list[dict[str, Any]]:
        p = self.dir / "journal.jsonl"
        rows = [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []
        return [r for r in rows if node is None or r["node"] == node]

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(fresh_schema_dsn(), tmp_path)
    yield c
    c.stop()


def two_replicas(c: Cluster) -> None:
    c.start("ctl-a")
    wait_for("ctl-a to lead", lambda: c.leader() == (1, "ctl-a") or None)
    c.start("ctl-b")
    wait_for("ctl-b to run as standby",
             lambda: (s := c.status("ctl-b")) is not None and s["role"] == "standby")


def test_kill_9_between_audit_insert_and_scheduler_call(cluster: Cluster) -> None:
    c = cluster
    two_replicas(c)
    (c.dir / "stall-ctl-a").touch()   # ctl-a will hang inside drain(), before the scheduler
    c.report("gpu001")
    wait_for("the pending audit row", lambda: ("drain", "pending", 1) in c.audit("gpu001"))
    t0 = time.monotonic()
    c.procs["ctl-a"].kill()           # kill -9: audit says pending, scheduler untouched
    done = wait_for("the takeover's drain", lambda: c.journal("gpu001"), timeout=20)
    took = time.monotonic() - t0
    time.sleep(1.5)                   # room for a double action to show up
    assert [e["by"] for e in c.journal("gpu001")] == ["ctl-b"], c.journal()
    assert done[0]["epoch"] == 2 and took <= 15.0, (done, took)
    assert c.audit("gpu001") == [("drain", "done", 2)]  # claimed under the new epoch


def test_sigstop_partition_then_sigcont_old_leader_never_acts(cluster: Cluster) -> None:
    c = cluster
    two_replicas(c)
    a = c.procs["ctl-a"]
    a.send_signal(signal.SIGSTOP)     # cut off: its session (and advisory lock) stay open
    t0 = time.monotonic()
    c.report("gpu002")
    wait_for("the standby to drain", lambda: c.journal("gpu002"), timeout=20)
    took = time.monotonic() - t0
    assert c.leader() == (2, "ctl-b") and took <= 15.0, took
    a.send_signal(signal.SIGCONT)     # back: it must find itself deposed and not act
    c.report("gpu003")
    wait_for("the new leader to drain gpu003", lambda: c.journal("gpu003"))
    wait_for("ctl-a to say standby", lambda: (s := c.status("ctl-a")) is not None
             and s["role"] == "standby" and s["pid"] == a.pid or None)
    time.sleep(1.5)
    assert [(e["node"], e["by"]) for e in c.journal()] == [("gpu002", "ctl-b"),
                                                          ("gpu003", "ctl-b")]
    assert c.audit("gpu002") == [("drain", "done", 2)]
    assert c.audit("gpu003") == [("drain", "done", 2)]


def test_a_deposed_leaders_audit_insert_fails_on_the_epoch() -> None:
    dsn = fresh_schema_dsn()
    clock = SystemClock()
    sa, sb = PgStore(dsn, identity="ctl-a", size=1), PgStore(dsn, identity="ctl-b", size=1)
    a = PgAdvisoryLeadership(sa, "ctl-a", clock, ttl_s=1.0)
    b = PgAdvisoryLeadership(sb, "ctl-b", clock, ttl_s=1.0)
    assert a.acquire() and a.fence() == 1
    assert not b.acquire() and b.status().leader == "ctl-a"
    assert sa.begin_batch(ControllerMemory(), ControllerMemory(), [], False, epoch=1) == []
    time.sleep(1.2)                   # a stops renewing (frozen): b ends its sessions
    assert a.fence() is None          # a knows on its own clock it may not act
    assert not b.acquire()            # this try terminates a's session ...
    assert wait_for("b to take over", lambda: b.acquire()) and b.fence() == 2
    with pytest.raises(StoreError, match="terminating connection"):  # a's pooled session
        sa.begin_batch(ControllerMemory(), ControllerMemory(), [], False, epoch=1)
    with pytest.raises(StoreError, match="fenced: epoch 1 is no longer the leader's"):
        sa.begin_batch(ControllerMemory(), ControllerMemory(), [], False, epoch=1)
    assert not a.acquire() and b.status().role.value == "leader"
    st = a.status()
    assert st.role.value == "standby" and st.leader == "ctl-b" and st.epoch == 2
    b.release()
    assert wait_for("a to take over again", lambda: a.acquire()) and a.fence() == 3
    a.release()


def test_replica_sets_on_two_schemas_of_one_database_each_have_a_leader() -> None:
    clock = SystemClock()
    leads = [PgAdvisoryLeadership(PgStore(fresh_schema_dsn(), identity=f"ctl-{k}", size=1),
                                  f"ctl-{k}", clock) for k in "ab"]
    try:   # one database-wide lock key would leave the second set without a leader
        assert [(x.acquire(), x.fence()) for x in leads] == [(True, 1), (True, 1)]
    finally:
        for x in leads:
            x.release()


def test_no_store_means_standby_and_status_says_why() -> None:
    dsn = fresh_schema_dsn()
    store = PgStore(dsn, identity="ctl-a", size=1)
    store.dsn = "postgresql://minutiae@127.0.0.1:1/none"   # the store went away
    lead = PgAdvisoryLeadership(store, "ctl-a", SystemClock())
    assert not lead.acquire() and lead.fence() is None
    st = lead.status()
    assert st.role.value == "standby" and st.detail and "not acting" in st.detail
    os.environ.get("MINUTIAE_PG_DSN")  # (the real server is untouched)

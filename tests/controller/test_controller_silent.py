"""Silent nodes: a node the scheduler knows whose agent never reported, or stopped reporting,
counts as unavailable in the global and domain budgets, and says so in status, nodes and
explain."""

from __future__ import annotations

from dataclasses import replace

from fastapi.testclient import TestClient

from minutiae.controller.http.api import make_app
from minutiae.controller.http.client import format_explain, format_nodes, format_status
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.state import Verb
from minutiae.controller.store import Store
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "t0ken-for-silent-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "message": "GPU has fallen off the bus"}
NODES = [f"gpu{i:03d}" for i in range(1, 21)]


def report(node, findings=(), rack=None):
    return {"node": node, "status": "critical" if findings else "ok",
            "checks": [{"check": "gpu", "status": "critical" if findings else "ok",
                        "findings": list(findings)}],
            "domains": {"rack": rack or f"r-{node}"}}


def make(tmp_path, policy):
    clock = FakeClock()
    backend = RecordingBackend(name="slurm")
    for n in NODES:
        backend.add_node(n)
    ctl = Controller(Store(tmp_path / "c.db"), backend, policy, clock)
    return ctl, backend, clock, TestClient(make_app(ctl, TOKEN))


def held(plan):
    return [(d.node, d.budget.check, d.budget.detail) for d in plan.decisions
            if d.action is Verb.HOLD]


def test_nodes_that_never_reported_count_against_the_global_budget(tmp_path):
    pol = replace(load_policy(), dry_run=False)                 # 10 % of 20 = 2
    ctl, backend, clock, client = make(tmp_path, pol)
    for n in NODES[:18]:                                        # gpu019, gpu020 never report
        client.post("/v1/reports", json=report(n, [XID79] if n == "gpu003" else ()),
                    headers=AUTH)
    plan = ctl.step()
    assert backend.calls == []
    assert held(plan) == [("gpu003", "global", "3/20 nodes unavailable (2 silent) would exceed "
                                               "max_unavailable_fraction 0.1 (limit 2)")]
    st = client.get("/v1/status").json()
    assert (st["nodes"], st["silent"], st["never_reported"]) == (20, 2, 2)
    assert st["health"] == {"healthy": 17, "unhealthy": 1, "unknown": 2}
    assert "silent: 2 in service but not reporting (2 never reported)" in format_status(st)
    rows = {r["node"]: r for r in client.get("/v1/nodes").json()}
    assert rows["gpu019"]["silent"] and rows["gpu019"]["report_age_s"] is None
    assert rows["gpu019"]["health"] == "unknown" and rows["gpu019"]["sched"] == "available"
    assert not rows["gpu001"]["silent"]
    table = format_nodes(list(rows.values())).splitlines()
    assert [ln.split()[5] for ln in table if ln.startswith("gpu019")] == ["never!"]
    ex = client.get("/v1/nodes/gpu019/explain").json()
    assert ex["why"] == ("silent: no report received; counted as unavailable by the safety "
                         "budget, never drained or resumed on it")
    assert format_explain(ex).startswith("gpu019: silent: no report received")
    # once they report, the drain goes through
    for n in ("gpu019", "gpu020"):
        client.post("/v1/reports", json=report(n), headers=AUTH)
    clock.advance(5)
    plan = ctl.step()
    assert [c.node for c in backend.calls if c.op == "drain"] == ["gpu003"]
    (d,) = plan.acting()
    assert d.budget.detail.startswith("1/20 unavailable within limit 2;")


def test_nodes_that_stopped_reporting_count_against_their_domain(tmp_path):
    base = load_policy()
    pol = replace(base, dry_run=False, budget=replace(base.budget, max_unavailable_fraction=0.5))
    ctl, backend, clock, client = make(tmp_path, pol)
    for n in NODES:
        client.post("/v1/reports", json=report(n, rack="rA" if n <= "gpu003" else None),
                    headers=AUTH)
    ctl.step()
    clock.advance(pol.stale_after_s + 1)                        # gpu001, gpu002 fall silent
    for n in NODES[2:]:
        client.post("/v1/reports", json=report(n, [XID79] if n == "gpu003" else (),
                                               rack="rA" if n == "gpu003" else None),
                    headers=AUTH)
    plan = ctl.step()
    assert backend.calls == []
    assert held(plan) == [("gpu003", "domain:rack", "2 node(s) of rack rA already unavailable; "
                                                    "cap 2")]
    rows = {r["node"]: r for r in ctl.node_rows()}
    assert rows["gpu001"]["silent"] and rows["gpu001"]["report_age_s"] == pol.stale_after_s + 1
    assert rows["gpu001"]["why"] == f"last report {pol.stale_after_s + 1:.0f}s old (stale after " \
                                    f"{pol.stale_after_s:g}s)"
    st = ctl.status()
    assert (st["silent"], st["never_reported"]) == (2, 0)
    client.post("/v1/reports", json=report("gpu001", rack="rA"), headers=AUTH)  # back
    clock.advance(1)
    ctl.step()
    assert [c.node for c in backend.calls if c.op == "drain"] == ["gpu003"]


def test_fleet_nodes_limits_which_scheduler_nodes_are_counted(tmp_path):
    pol = replace(load_policy(), dry_run=False, fleet_nodes=r"gpu0(0[1-9]|1[0-8])")
    ctl, backend, _, client = make(tmp_path, pol)
    for n in NODES[:18]:
        client.post("/v1/reports", json=report(n, [XID79] if n == "gpu003" else ()),
                    headers=AUTH)
    plan = ctl.step()
    assert [c.node for c in backend.calls if c.op == "drain"] == ["gpu003"]
    assert plan.acting()[0].budget.detail.startswith("1/18 unavailable within limit 1;")
    assert ctl.status()["nodes"] == 18


def test_a_scheduler_that_cannot_list_its_nodes_changes_nothing(tmp_path):
    pol = replace(load_policy(), dry_run=False)
    ctl, backend, _, client = make(tmp_path, pol)
    for n in NODES[:18]:
        client.post("/v1/reports", json=report(n), headers=AUTH)
    backend.unreachable = True
    ctl.step()
    assert any(p[1].startswith("scheduler unreachable, not acting this step")
               for p in ctl.counters.problems)
    assert ctl.status()["nodes"] == 18 and backend.calls == []

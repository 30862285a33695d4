"""The controller's /metrics exports the series deploy/prometheus/METRICS.md lists as needed by
the alert rules and dashboards (breaker, pause age, leader, silent, budget, decisions)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.state import Pause
from minutiae.controller.store import Store
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "admin-token-0123456789abcdef"
H = {"Authorization": f"Bearer {TOKEN}"}
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "message": "GPU has fallen off the bus"}


def _rep(node: str, bad: bool = False) -> dict[str, object]:
    st = "critical" if bad else "ok"
    return {"node": node, "status": st,
            "checks": [{"check": "gpu", "status": st, "findings": [XID79] if bad else []}]}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_md_series_follow_the_controller(tmp_path: Path) -> None:
    be = RecordingBackend(name="slurm")
    for i in range(1, 31):
        be.add_node(f"gpu{i:03d}")
    clock = FakeClock()
    ctl = Controller(Store(tmp_path / "c.db"), be, replace(load_policy(), dry_run=False), clock)
    c = TestClient(make_app(ctl, TOKEN))
    for i in range(2, 31):
        c.post("/v1/reports", json=_rep(f"gpu{i:03d}"), headers=H)
    c.post("/v1/reports", json=_rep("gpu001", True), headers=H)
    clock.advance(0.3)                      # the step runs 0.3 s after the report arrived
    ctl.step()
    s = _samples(c.get("/metrics").text)
    assert s[("minutiae_controller_scheduler_up", (("scheduler", "slurm"),))] == 1
    assert s[("minutiae_controller_ingest_duration_seconds_count", ())] == 30
    assert 0 < s[("minutiae_controller_ingest_duration_seconds_sum", ())] < 30
    lat = (("verb", "drain"),)
    assert s[("minutiae_controller_decision_latency_seconds_count", lat)] == 1
    assert abs(s[("minutiae_controller_decision_latency_seconds_sum", lat)] - 0.3) < 1e-6
    assert s[("minutiae_controller_decision_latency_seconds_bucket",
              (("le", "0.25"), ("verb", "drain")))] == 0
    assert s[("minutiae_controller_decision_latency_seconds_bucket",
              (("le", "0.5"), ("verb", "drain")))] == 1
    drains = {dict(k[1])["rule"]: v for k, v in s.items()
              if k[0] == "minutiae_controller_decisions_total" and ("verb", "drain") in k[1]}
    assert list(drains.values()) == [1] and list(drains) != [""]
    assert s[("minutiae_controller_leader", ())] == 1
    assert s[("minutiae_controller_budget_max_unavailable", ())] == 3  # 10 % of 30
    assert s[("minutiae_controller_unavailable_nodes", ())] == 1      # gpu001 drained
    assert s[("minutiae_controller_paused_seconds", ())] == 0
    assert [v for k, v in s.items() if k[0] == "minutiae_controller_breaker_tripped"] == [0]
    assert s[("minutiae_controller_breaker_tripped", (("reason", ""),))] == 0
    assert c.post("/v1/pause", json={"reason": "rollout"}).status_code == 401
    assert c.post("/v1/pause", json={"reason": "rollout"}, headers=H).status_code == 200
    clock.advance(120)
    s = _samples(c.get("/metrics").text)
    assert s[("minutiae_controller_paused_seconds", ())] == 120
    ctl.memory = replace(ctl.memory, pause=Pause("storm: 9 nodes in 60 s", clock.now(),
                                                 "breaker"))
    s = _samples(c.get("/metrics").text)
    assert s[("minutiae_controller_breaker_tripped",
              (("reason", "storm: 9 nodes in 60 s"),))] == 1
    assert ("minutiae_controller_breaker_tripped", (("reason", ""),)) not in s
    # every controller series METRICS.md documents is exported
    doc = (Path(__file__).resolve().parents[2] / "deploy/prometheus/METRICS.md").read_text()
    names = {n.removesuffix("_total") for n in re.findall(r"`(minutiae_controller_[a-z_]+)`",
                                                         doc)}
    got = {k[0].removesuffix("_total").removesuffix("_count") for k in s}
    assert names and names <= got, names - got
    assert s[("minutiae_controller_paused_seconds", ())] == 0


def test_scheduler_up_follows_the_scheduler(tmp_path: Path) -> None:
    be = RecordingBackend(name="slurm")
    be.add_node("gpu001")
    clock = FakeClock()
    ctl = Controller(Store(tmp_path / "c.db"), be, load_policy(), clock, sched_ttl_s=0)
    c = TestClient(make_app(ctl, TOKEN))
    assert not any(k[0] == "minutiae_controller_scheduler_up"      # not asked yet: absent
                   for k in _samples(c.get("/metrics").text))
    c.post("/v1/reports", json=_rep("gpu001"), headers=H)
    ctl.step()
    up = ("minutiae_controller_scheduler_up", (("scheduler", "slurm"),))
    assert _samples(c.get("/metrics").text)[up] == 1
    be.unreachable = True
    clock.advance(1)
    ctl.step()
    assert _samples(c.get("/metrics").text)[up] == 0
    assert c.get("/v1/status").json()["counters"]["scheduler_up"] is False
    be.unreachable = False
    clock.advance(1)
    ctl.step()
    assert _samples(c.get("/metrics").text)[up] == 1


def test_silent_nodes_counted(tmp_path: Path) -> None:
    be = RecordingBackend(name="slurm")
    for i in range(1, 6):
        be.add_node(f"gpu{i:03d}")
    clock = FakeClock()
    ctl = Controller(Store(tmp_path / "c.db"), be, load_policy(), clock)
    c = TestClient(make_app(ctl, TOKEN))
    for i in range(1, 6):
        c.post("/v1/reports", json=_rep(f"gpu{i:03d}"), headers=H)
    ctl.step()
    clock.advance(ctl.policy.stale_after_s + 5)
    for i in range(1, 4):
        c.post("/v1/reports", json=_rep(f"gpu{i:03d}"), headers=H)
    ctl.step()
    s = _samples(c.get("/metrics").text)
    assert s[("minutiae_controller_silent_nodes", ())] == 2
    assert s[("minutiae_controller_unavailable_nodes", ())] == 2

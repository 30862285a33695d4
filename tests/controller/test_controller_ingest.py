"""The ingest hot path: the ASGI fast path keeps every guarantee of the framework route (token,
body limit, validation naming the field), unchanged reports travel as digest heartbeats, and a
real agent ``Pusher`` speaks that protocol with a real controller app (contract test)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.agent.push import Outbox, Pusher
from minutiae.controller.http.api import MAX_BODY, make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.reconcile import assess
from minutiae.controller.record import ReportRecorder
from minutiae.controller.service import Controller
from minutiae.controller.state import Health
from minutiae.controller.store import Store
from minutiae.errors import MinutiaeError
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "t0ken-for-ingest-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
POLICY = replace(load_policy(), dry_run=False)


def report(node: str, status: str = "ok", seq: int = 1) -> dict:
    return {"node": node, "status": status, "time": 1.0 + seq,
            "checks": [{"check": "gpu", "status": status, "findings": []}],
            "domains": {"rack": "r1"}, "agent": {"version": "t", "seq": seq}}


def make(tmp_path, clock: FakeClock) -> tuple[Controller, TestClient]:
    backend = RecordingBackend(name="slurm")
    for i in range(1, 5):
        backend.add_node(f"gpu{i:03d}")
    ctl = Controller(Store(tmp_path / "c.db"), backend, POLICY, clock)
    return ctl, TestClient(make_app(ctl, TOKEN))


def test_heartbeat_refreshes_an_unchanged_report_and_survives_a_restart(tmp_path):
    clock = FakeClock()
    ctl, client = make(tmp_path, clock)
    r = client.post("/v1/reports", json=report("gpu001"), headers=AUTH)
    assert r.status_code == 202
    digest = r.json()["digest"]
    assert len(digest) == 32
    # the same content with another time and seq has the same digest
    r2 = client.post("/v1/reports", json=report("gpu001", seq=2), headers=AUTH)
    assert r2.json()["digest"] == digest
    ctl.step()
    clock.advance(POLICY.stale_after_s + 30)
    assert assess(ctl.intake.reports["gpu001"], POLICY, clock.now()).health is Health.UNKNOWN
    hb = client.post("/v1/reports", json={"node": "gpu001", "digest": digest,
                                           "agent": {"seq": 3, "age_s": 2.0}}, headers=AUTH)
    assert hb.status_code == 202 and hb.json()["digest"] == digest
    rep = ctl.intake.reports["gpu001"]
    assert rep.time == clock.now() - 2.0                    # dated by the controller, minus age
    assert assess(rep, POLICY, clock.now()).health is Health.HEALTHY
    assert ctl.counters.reports == 3
    ctl.step()                                              # the new time is written behind
    (received,) = [t for n, t, _, _ in ctl.store.load_reports() if n == "gpu001"]
    assert received == clock.now() - 2.0
    # a restarted controller knows the digest from its store
    ctl2 = Controller(Store(tmp_path / "c.db"), RecordingBackend(name="slurm"), POLICY, clock)
    c2 = TestClient(make_app(ctl2, TOKEN))
    clock.advance(5)
    assert c2.post("/v1/reports", json={"node": "gpu001", "digest": digest},
                   headers=AUTH).status_code == 202
    assert ctl2.intake.reports["gpu001"].time == clock.now()


def test_heartbeats_that_cannot_stand_for_a_report_are_refused(tmp_path):
    clock = FakeClock()
    ctl, client = make(tmp_path, clock)
    digest = client.post("/v1/reports", json=report("gpu001"), headers=AUTH).json()["digest"]
    changed = client.post("/v1/reports", json=report("gpu001", status="warning", seq=2),
                          headers=AUTH).json()["digest"]
    assert changed != digest
    stale = client.post("/v1/reports", json={"node": "gpu001", "digest": digest}, headers=AUTH)
    assert stale.status_code == 409 and "send the full report" in stale.json()["detail"]
    unknown = client.post("/v1/reports", json={"node": "gpu002", "digest": digest}, headers=AUTH)
    assert unknown.status_code == 409
    bad = client.post("/v1/reports", json={"node": "gpu001", "digest": "../x"}, headers=AUTH)
    assert bad.status_code == 422 and "digest must be 32 hex digits" in bad.json()["detail"]
    inj = client.post("/v1/reports", json={"node": "gpu001;reboot", "digest": changed},
                      headers=AUTH)
    assert inj.status_code == 422
    assert client.post("/v1/reports", json={"node": "gpu001", "digest": changed}).status_code \
        == 401
    assert ctl.intake.reports["gpu001"].status.label == "warning"


def test_fast_path_keeps_limits_and_messages(tmp_path):
    clock = FakeClock()
    ctl, client = make(tmp_path, clock)
    big = client.post("/v1/reports", content=b"{" + b" " * MAX_BODY + b"}",
                      headers={**AUTH, "content-type": "application/json"})
    assert big.status_code == 413
    garbage = client.post("/v1/reports", content=b"\xff\xfe{not json", headers=AUTH)
    assert garbage.status_code == 422 and garbage.json()["detail"].startswith(
        "report: body is not JSON")
    arr = client.post("/v1/reports", json=[1, 2], headers=AUTH)
    assert arr.status_code == 422 and "must be a JSON object" in arr.json()["detail"]
    field = client.post("/v1/reports", json={**report("gpu001"), "checks": "x"}, headers=AUTH)
    assert field.status_code == 422 and "checks must be a list" in field.json()["detail"]
    wrong = client.post("/v1/reports", json=report("gpu001"),
                        headers={"Authorization": "Bearer " + "x" * len(TOKEN)})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    # the framework still serves everything else, with the same body limit
    assert client.post("/v1/pause", content=b" " * (MAX_BODY + 1),
                       headers=AUTH).status_code == 413
    assert client.get("/v1/status").status_code == 200
    ctl.step()
    m = client.get("/metrics").text
    assert "minutiae_controller_step_seconds " in m
    assert ctl.status()["counters"]["last_step_ms"] >= 0
    assert 'minutiae_controller_refused_total{why="too_large"} 2.0' in m
    assert 'minutiae_controller_refused_total{why="token"} 1.0' in m
    assert 'minutiae_controller_refused_total{why="DataError"} 3.0' in m
    assert ctl.counters.rejected == 2            # the body that is not JSON never reached it


class AppTransport:
    """The agent's HTTP seam wired to a real controller app (TestClient)."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.bodies: list[dict] = []

    def post(self, url, json, headers):
        self.bodies.append(json)
        r = self.client.post("/v1/reports", json=json, headers=dict(headers))
        return r.status_code, r.json()


def test_agent_sends_heartbeats_while_unchanged_and_full_reports_otherwise(tmp_path):
    clock = FakeClock()
    ctl, client = make(tmp_path, clock)
    tr = AppTransport(client)
    pusher = Pusher("http://ctl", TOKEN, clock, tr, retries=0)
    box = Outbox()
    for seq, status in enumerate(["ok", "ok", "ok", "critical", "critical", "ok"], 1):
        box.add({**report("gpu003", status, seq), "agent": {"seq": seq, "created": clock.now()}})
        res = pusher.flush(box)
        assert res.sent == 1 and not res.failed
        assert ctl.intake.reports["gpu003"].status.label == status
        assert ctl.intake.reports["gpu003"].time == clock.now()
        clock.advance(10)
    kinds = ["beat" if "status" not in b else "full" for b in tr.bodies]
    assert kinds == ["full", "beat", "beat", "full", "beat", "full"]
    # a controller that lost the report (fresh store): the heartbeat is refused, the full
    # report follows at once, nothing is lost
    (tmp_path / "other").mkdir()
    ctl2, client2 = make(tmp_path / "other", clock)
    tr.client = client2
    box.add({**report("gpu003", "ok", 7), "agent": {"seq": 7, "created": clock.now()}})
    res = pusher.flush(box)
    assert res.sent == 1 and res.dropped == 0 and not box.items
    assert ["beat" if "status" not in b else "full" for b in tr.bodies[-2:]] == ["beat", "full"]
    assert ctl2.intake.reports["gpu003"].status.label == "ok"


@pytest.mark.parametrize("path", ["/v1/echo", "/v1/reports"])
def test_hot_paths_need_the_token(tmp_path, path):
    _, client = make(tmp_path, FakeClock())
    assert client.post(path, json=report("gpu001")).status_code == 401
    assert client.post(path, json=report("gpu001"), headers=AUTH).status_code in (200, 202)


def test_recorded_history_keeps_nodes_alive_through_heartbeats(tmp_path):
    """``MINUTIAE_RECORD`` (for ``minutiae backtest``): a heartbeat is recorded as the node's
    full report at the heartbeat's time (at most once per recorder heartbeat interval)."""
    clock = FakeClock()
    ctl = Controller(Store(tmp_path / "c.db"), RecordingBackend(name="slurm"), POLICY, clock,
                     recorder=ReportRecorder(tmp_path / "rec", heartbeat_s=60.0))
    client = TestClient(make_app(ctl, TOKEN))
    digest = client.post("/v1/reports", json=report("gpu001"), headers=AUTH).json()["digest"]
    for _ in range(12):                                     # 10 s apart for 2 minutes
        clock.advance(10)
        assert client.post("/v1/reports", json={"node": "gpu001", "digest": digest},
                           headers=AUTH).status_code == 202
    lines = [json.loads(x) for x in (tmp_path / "rec/reports.jsonl").read_text().splitlines()]
    t0 = lines[0]["time"]
    assert [round(x["time"] - t0) for x in lines] == [0, 60, 120]
    assert {x["status"] for x in lines} == {"ok"} and all("digest" not in x for x in lines)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
                     lambda kids: st.lists(kids, max_size=4)
                     | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=12)


def test_heartbeat_garbage_is_refused_never_a_crash(tmp_path):
    ctl = Controller(Store(tmp_path / "c.db"), RecordingBackend(name="slurm"), POLICY,
                     FakeClock())

    @settings(max_examples=200, deadline=None)
    @given(st.dictionaries(st.sampled_from(["node", "digest", "agent", "x"]), _json, max_size=4))
    def run(body):
        with contextlib.suppress(MinutiaeError):
            ctl.ingest_digest({**body, "digest": body.get("digest", "0" * 32)})
        assert ctl.intake.reports == {}

    run()

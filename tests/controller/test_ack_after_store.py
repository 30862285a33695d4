"""Acknowledge after store: a 202 means the report is in the store (no step needed), with the
writer thread (the app's lifespan) and without it; a store that cannot take it is a 503 the
agent keeps the report for (said once in the problems, and its end too); a replayed report
(the same idempotency key) is answered with the same digest and not stored twice; the agent
sends a key per report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from flaky_store import FlakyStore

from minutiae.agent.runner import Agent, AgentConfig
from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.model import CheckResult, Status
from minutiae.node.check import NodeReport
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "t0ken-for-acks-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
POLICY = replace(load_policy(), dry_run=False)


def report(node: str, key: str | None = None, status: str = "ok") -> dict[str, Any]:
    agent: dict[str, Any] = {"version": "t", "seq": 1}
    if key is not None:
        agent["id"] = key
    return {"node": node, "status": status,
            "checks": [{"check": "gpu", "status": status, "findings": []}],
            "domains": {"rack": "r1"}, "agent": agent}


def stored(path: Path) -> dict[str, float]:
    return {n: t for n, t, _r, _d in Store(path).load_reports()}


def controller(tmp_path: Path, store: Store | None = None) -> Controller:
    return Controller(store or Store(tmp_path / "c.db"), RecordingBackend(name="slurm"), POLICY,
                      FakeClock())


def test_a_202_means_stored_with_the_writer_thread_and_without(tmp_path: Path) -> None:
    ctl = controller(tmp_path)
    with TestClient(make_app(ctl, TOKEN)) as client:      # lifespan: the writer thread
        for i in range(20):
            r = client.post("/v1/reports", json=report(f"gpu{i:03d}"), headers=AUTH)
            assert r.status_code == 202
            assert f"gpu{i:03d}" in stored(tmp_path / "c.db")   # before any step
        assert ctl.counters.steps == 0
        assert 1 <= ctl.committer.writes <= 20 and ctl.committer.rows == 20
    (tmp_path / "b").mkdir()
    ctl2 = controller(tmp_path / "b")
    client2 = TestClient(make_app(ctl2, TOKEN))              # no lifespan: stored in the request
    assert client2.post("/v1/reports", json=report("gpu100"), headers=AUTH).status_code == 202
    assert "gpu100" in stored(tmp_path / "b" / "c.db")


def test_a_store_that_cannot_take_the_report_is_a_503_and_said_once(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "c.db")
    ctl = controller(tmp_path, store)
    with TestClient(make_app(ctl, TOKEN)) as client:
        assert client.post("/v1/reports", json=report("gpu001"), headers=AUTH).status_code == 202
        store.down = True
        for _ in range(3):
            r = client.post("/v1/reports", json=report("gpu002"), headers=AUTH)
            assert r.status_code == 503, r.text
            assert "not stored" in r.json()["detail"] and "connection refused" in r.json()["detail"]
        assert "gpu002" not in stored(tmp_path / "c.db")
        problems = [w for _t, w in ctl.counters.problems]
        assert sum("reports not stored" in w for w in problems) == 1, problems
        store.down = False
        r = client.post("/v1/reports", json=report("gpu002"), headers=AUTH)   # the agent again
        assert r.status_code == 202
        assert "gpu002" in stored(tmp_path / "c.db")
        assert any("store back" in w for _t, w in ctl.counters.problems)


def test_a_replayed_report_is_answered_not_stored_twice(tmp_path: Path) -> None:
    ctl = controller(tmp_path)
    with TestClient(make_app(ctl, TOKEN)) as client:
        first = client.post("/v1/reports", json=report("gpu001", key="k-1"), headers=AUTH)
        rows = ctl.committer.rows
        again = client.post("/v1/reports", json=report("gpu001", key="k-1"), headers=AUTH)
        assert again.status_code == 202 and again.json()["digest"] == first.json()["digest"]
        assert again.json()["received"] == first.json()["received"]
        assert ctl.committer.rows == rows                  # nothing stored the second time
        other = client.post("/v1/reports", json=report("gpu001", key="k-2"), headers=AUTH)
        assert other.status_code == 202 and ctl.committer.rows == rows + 1
        # a key that is not a short token is no key: the report is simply taken
        odd = client.post("/v1/reports", json=report("gpu001", key="x" * 65), headers=AUTH)
        assert odd.status_code == 202 and ctl.committer.rows == rows + 2
    # the key survives a restart (read back from the stored body)
    ctl2 = controller(tmp_path)
    assert ctl2.intake.keys.get("gpu001") is None          # the last one had no valid key
    with TestClient(make_app(ctl2, TOKEN)) as client:
        client.post("/v1/reports", json=report("gpu001", key="k-3"), headers=AUTH)
    ctl3 = controller(tmp_path)
    assert ctl3.intake.keys["gpu001"] == "k-3"


def test_the_agent_sends_a_fresh_key_with_every_report(tmp_path: Path) -> None:
    clock = FakeClock()
    agent = Agent(AgentConfig(node="gpu001", state_dir=tmp_path),
                  lambda: NodeReport("gpu001", clock.now(),
                                     (CheckResult("gpu", Status.OK, (), None, 8),)), clock)
    keys = [agent.run_once()["agent"]["id"] for _ in range(3)]
    assert len(set(keys)) == 3 and all(len(k) == 32 for k in keys)


def test_a_write_that_fails_unexpectedly_is_never_acknowledged_later(tmp_path: Path) -> None:
    """A bug in a store (any exception) fails its take's requests; a later take does not
    acknowledge them by its ticket."""

    class Broken(Store):
        calls = 0

        def save_reports(self, rows: Any, beats: Any = (), wake: bool = False) -> None:
            Broken.calls += 1
            if Broken.calls == 1:
                raise TypeError("a bug")
            super().save_reports(rows, beats, wake)

    ctl = controller(tmp_path, Broken(tmp_path / "c.db"))
    with TestClient(make_app(ctl, TOKEN)) as client:
        r = client.post("/v1/reports", json=report("gpu001"), headers=AUTH)
        assert r.status_code == 503 and "TypeError: a bug" in r.json()["detail"]
        r = client.post("/v1/reports", json=report("gpu002"), headers=AUTH)
        assert r.status_code == 202
    assert set(stored(tmp_path / "c.db")) == {"gpu001", "gpu002"}   # given back, then stored

"""Two real ``minutiae serve --store postgresql://…`` processes on the real PostgreSQL:
GET /v1/status says leader / standby with the epoch and the leader's identity; a report taken
by the standby is seen by the leader (ingest on every replica); kill -9 of the leader: the
standby says leader within 15 s, with the next epoch; an agent listing both URLs fails over
from the dead one to the live one without backing off."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ha_support import fresh_schema_dsn

from minutiae.agent.push import Outbox, Pusher
from minutiae.testing import FakeClock

TOKEN = "ha-serve-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status(url: str) -> dict[str, Any] | None:
    try:
        r = httpx.get(f"{url}/v1/status", headers=AUTH, timeout=2.0)
    except httpx.HTTPError:
        return None
    got: dict[str, Any] = r.json()
    return got


def wait(what: str, fn: Any, timeout: float = 30.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = fn()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def start_pair(tmp_path: Path, interval: str) -> list[tuple[subprocess.Popen[bytes], str]]:
    dsn = fresh_schema_dsn()
    out = []
    for name in ("a", "b"):
        port = free_port()
        log = open(tmp_path / f"serve-{name}.log", "wb")  # noqa: SIM115 - the process keeps it
        p = subprocess.Popen(
            [sys.executable, "-m", "minutiae.cli.main", "serve", "--store", dsn,
             "--listen", f"127.0.0.1:{port}", "--backend", "dry-run", "--interval", interval,
             "--cluster", "hatest"], stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "MINUTIAE_TOKEN": TOKEN, "MINUTIAE_LOG_JSON": "0"},
            cwd=tmp_path)
        url = f"http://127.0.0.1:{port}"
        out.append((p, url))
        wait(f"serve {name} to answer", lambda u=url: status(u))
    return out


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], str]]]:
    out = start_pair(tmp_path, "0.5")
    yield out
    for p, _ in out:
        p.kill()
        p.wait()


def test_a_report_taken_by_the_standby_wakes_the_leader(tmp_path: Path) -> None:
    """Steps every 60 s: only the standby's NOTIFY can make the leader decide in seconds."""
    pair = start_pair(tmp_path, "60")
    try:
        (_pa, a), (_pb, b) = pair
        wait("a to lead", lambda: (s := status(a)) and s["role"] == "leader")
        wait("b to be standby", lambda: (s := status(b)) and s["role"] == "standby")
        for i in range(20):   # a fleet the budget lets one node out of
            httpx.post(f"{a}/v1/reports", headers=AUTH, timeout=5.0, json={
                "node": f"gpu{i:03d}", "status": "ok",
                "checks": [{"check": "gpu", "status": "ok", "findings": []}]})
        time.sleep(1.0)
        t0 = time.monotonic()
        r = httpx.post(f"{b}/v1/reports", headers=AUTH, timeout=5.0, json={
            "node": "gpu007", "status": "critical", "checks": [{
                "check": "gpu", "status": "critical", "findings": [{
                    "kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
                    "message": "GPU has fallen off the bus"}]}]})
        assert r.status_code == 202, r.text
        rows = wait("the leader's decision", lambda: [
            x for x in httpx.get(f"{a}/v1/audit", params={"node": "gpu007"},
                                 headers=AUTH).json() if x["action"] == "drain"],
            timeout=20)
        assert time.monotonic() - t0 < 10.0 and rows[0]["status"] == "dry_run", rows
    finally:
        for p, _ in pair:
            p.kill()
            p.wait()


def test_status_roles_ingest_on_the_standby_and_kill_9_takeover(
        replicas: list[tuple[subprocess.Popen[bytes], str]]) -> None:
    (pa, a), (_pb, b) = replicas
    sa = wait("a to lead", lambda: (s := status(a)) and s["role"] == "leader" and s)
    sb = wait("b to be standby", lambda: (s := status(b)) and s["role"] == "standby"
              and s["leader"] and s)
    assert sa["leadership"] == sb["leadership"] == "postgres"
    assert sb["leader"] == sa["leader"] and sb["epoch"] == sa["epoch"] == 1
    assert "not acting" in sb["leadership_detail"]
    r = httpx.post(f"{b}/v1/reports", headers=AUTH, timeout=5.0, json={
        "node": "gpu901", "status": "ok", "checks": [{"check": "gpu", "status": "ok",
                                                      "findings": []}]})
    assert r.status_code == 202, r.text
    wait("the leader to see the standby's report", lambda: any(
        n["node"] == "gpu901" for n in httpx.get(f"{a}/v1/nodes", headers=AUTH).json()))
    t0 = time.monotonic()
    pa.kill()
    sb = wait("b to take over", lambda: (s := status(b)) and s["role"] == "leader" and s,
              timeout=20)
    took = time.monotonic() - t0
    assert took <= 15.0 and sb["epoch"] == 2 and sb["leader"] != sa["leader"], (took, sb)

    # an agent that lists both: the dead leader first
    clock = FakeClock()
    pusher = Pusher(f"{a},{b}", TOKEN, clock, retries=0, backoff_s=1.0)
    box = Outbox()
    for i in range(3):
        box.add({"node": "gpu902", "status": "ok", "time": clock.now() + i,
                 "checks": [{"check": "gpu", "status": "ok", "findings": []}],
                 "agent": {"created": clock.now()}})
    res = pusher.flush(box)
    assert (res.sent, res.failed, pusher.url) == (3, False, f"{b}/v1/reports"), res
    assert clock.now() == FakeClock().now()   # no backoff: the next replica at once
    assert any(n["node"] == "gpu902" for n in httpx.get(f"{b}/v1/nodes", headers=AUTH).json())

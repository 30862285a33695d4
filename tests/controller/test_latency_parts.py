"""Where a report's latency goes (``minutiae.controller.latency``, issue 17): the parts a
real ``minutiae serve`` records for each acknowledged report, handed over once by
``/v1/status``, and the GC pauses timed through ``gc.callbacks``."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path

import httpx

from minutiae.controller.latency import Parts
from minutiae.testing.serve import ServeProcess

TOKEN = "t0ken-for-latency-0123456789"
H = {"Authorization": f"Bearer {TOKEN}"}


def report(node: str) -> dict[str, object]:
    return {"node": node, "status": "ok", "checks": [
        {"check": "gpu", "status": "ok", "findings": []}], "agent": {"version": "t"}}


def test_take_gives_percentiles_once_and_times_gc() -> None:
    p = Parts()
    for ms in range(1, 101):
        p.add("write", ms / 1e3)
    got = p.take()["write"]
    assert got["n"] == 100 and got["p50_ms"] == 51.0 and got["p99_ms"] == 100.0
    assert got["max_ms"] == 100.0
    assert "write" not in p.take()          # handed over: the next take starts empty
    p.watch_gc()
    p.watch_gc()                             # once only
    try:
        gc.collect()
        got = p.take()
        assert got["gc2"]["n"] == 1 and got["gc2"]["max_ms"] > 0
    finally:
        gc.callbacks.remove(p._on_gc)


def test_serve_records_each_acknowledged_report(tmp_path: Path) -> None:
    with ServeProcess(tmp_path, TOKEN, "--backend", "dry-run", "--interval", "1",
                      env={"MINUTIAE_LOG_JSON": "0"}) as srv:
        httpx.get(f"{srv.url}/v1/status", headers=H, timeout=30)   # start from nothing
        t0 = time.perf_counter()
        for i in range(5):
            r = httpx.post(f"{srv.url}/v1/reports", headers=H, timeout=30,
                           content=json.dumps(report(f"gpu{i:03d}")))
            assert r.status_code == 202
        wall_ms = 1e3 * (time.perf_counter() - t0)
        parts = httpx.get(f"{srv.url}/v1/status", headers=H, timeout=30).json()["latency"]
    for name in ("queue", "linger", "write", "handoff", "resume", "send", "server"):
        assert parts[name]["n"] == 5, (name, parts)
    # the parts of one report fit in its time in the server, and that in the client's
    assert parts["server"]["max_ms"] <= wall_ms
    assert parts["write"]["max_ms"] <= parts["server"]["max_ms"]

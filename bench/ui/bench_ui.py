"""Web UI at 20,000 nodes: latency of every /ui request, the reads and the actions (median,
p95, max, and the process's CPU ms per request: the UI's background snapshot thread included)
next to the JSON read they are built from (``/v1/nodes``, ``/v1/status``) in the same process,
as a ratio; the machine load while measuring. After each node action the map is asked again,
as the page does (``HX-Trigger: minutiae-changed``): that rendering is of the changed fleet.
Goal (issue 14): no request over 200 ms.

    .venv/bin/python bench/ui/bench_ui.py [--nodes 20000] [--reps 15]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from fastapi.testclient import TestClient

from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "bench-token-0123456789abcdef"
MAP_AFTER = "/ui/fragments/map after an action"
XID = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
       "message": "GPU has fallen off the bus"}


def _fleet(n: int, tmp: Path) -> TestClient:
    """The fleet, reported and stored: the reports go in through the controller's ingest and
    its store writer (what ``POST /v1/reports`` does, without 20,000 requests: minutes)."""
    be = RecordingBackend(name="slurm")
    for i in range(n):
        be.add_node(f"gpu{i:05d}")
    ctl = Controller(Store(tmp / "c.db"), be, replace(load_policy(), dry_run=False), FakeClock())
    c = TestClient(make_app(ctl, TOKEN))
    for i in range(n):
        bad = i % 997 == 0
        st = "critical" if bad else "ok"
        ctl.ingest({
            "node": f"gpu{i:05d}", "status": st,
            "domains": {"rack": f"r{i // 32:04d}", "leaf": f"l{i // 512:03d}",
                        "nvl_domain": f"nvl{i // 72:04d}"},
            "checks": [{"check": "gpu", "status": st, "findings": [XID] if bad else []}]})
        if i % 1000 == 999:
            ctl.committer.commit()
    ctl.committer.commit()
    assert c.get("/v1/status", headers={"Authorization": f"Bearer {TOKEN}"}).json()[
        "counters"]["reports_stored"] == n
    ctl.step()
    return c


#: request name -> CPU seconds of the process per request
CPU: dict[str, list[float]] = {}


def _time(c: TestClient, path: str, reps: int, name: str = "", **params: str) -> list[float]:
    out = []
    c.get(path, params=params)   # warm-up (the UI's first request builds its snapshot)
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        r = c.get(path, params=params)
        out.append(time.perf_counter() - t0)
        CPU.setdefault(name or path, []).append(time.process_time() - c0)
        assert r.status_code == 200, (path, r.status_code)
    return out


def _time_actions(c: TestClient, reps: int) -> dict[str, list[float]]:
    """Every UI action with an admin session: pause/unpause pairs, drain then undo (resolve
    now) of a healthy node, resolve (acknowledge) of the unhealthy ones."""
    assert c.post("/ui/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303
    m = re.search(r'"X-CSRF-Token": "([0-9a-f]{32})"', c.get("/ui").text)
    assert m is not None
    h = {"X-CSRF-Token": m.group(1)}
    out: dict[str, list[float]] = {}

    def post(name: str, path: str, **data: str) -> None:
        c0, t0 = time.process_time(), time.perf_counter()
        r = c.post(path, data=data, headers=h)
        out.setdefault(name, []).append(time.perf_counter() - t0)
        CPU.setdefault(name, []).append(time.process_time() - c0)
        assert r.status_code == 200, (path, r.status_code, r.text[:200])
        if "NODE" in name:   # the page polls the map again after an action
            c0, t0 = time.process_time(), time.perf_counter()
            m = c.get("/ui/fragments/map")
            out.setdefault(MAP_AFTER, []).append(time.perf_counter() - t0)
            CPU.setdefault(MAP_AFTER, []).append(time.process_time() - c0)
            assert m.status_code == 200

    for i in range(reps):
        post("POST /ui/actions/pause", "/ui/actions/pause", reason="bench")
        post("POST /ui/actions/unpause", "/ui/actions/unpause")
        node = f"gpu{10 * i + 1:05d}"
        post("POST /ui/actions/drain/NODE", f"/ui/actions/drain/{node}", reason="bench")
        post("POST /ui/actions/undo/NODE", f"/ui/actions/undo/{node}")
        post("POST /ui/actions/resolve/NODE", f"/ui/actions/resolve/gpu{10 * i + 5:05d}",
             reason="bench")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        c = _fleet(a.nodes, Path(d))
        load0 = os.getloadavg()
        base = {"/v1/nodes": _time(c, "/v1/nodes", a.reps),
                "/v1/status": _time(c, "/v1/status", a.reps)}
        ui = {
            "/ui": _time(c, "/ui", a.reps),
            "/ui/static/htmx.min.js": _time(c, "/ui/static/htmx.min.js", a.reps),
            "/ui/fragments/status": _time(c, "/ui/fragments/status", a.reps),
            "/ui/fragments/map (all)": _time(c, "/ui/fragments/map", a.reps,
                                             "/ui/fragments/map (all)"),
            "/ui/fragments/map?sched=drained": _time(c, "/ui/fragments/map", a.reps,
                                                    "/ui/fragments/map?sched=drained",
                                                    sched="drained"),
            "/ui/fragments/map?q=range": _time(c, "/ui/fragments/map", a.reps,
                                              "/ui/fragments/map?q=range",
                                              q="gpu[00000-04999]", group="leaf"),
            "/ui/fragments/node/gpu00997": _time(c, "/ui/fragments/node/gpu00997", a.reps),
            "/ui/fragments/audit": _time(c, "/ui/fragments/audit", a.reps),
        }
        cpu0 = time.process_time()
        ui.update(_time_actions(c, a.reps))
        cpu_actions = time.process_time() - cpu0
        load1 = os.getloadavg()
    ref = statistics.median(base["/v1/nodes"])
    print(f"{a.nodes} nodes, {a.reps} reps; load {load0[0]:.2f} -> {load1[0]:.2f} "
          f"(cores {os.cpu_count()})")
    print(f"actions and the map after them: {cpu_actions:.1f} CPU s for {8 * a.reps} requests "
          f"({sum(sum(v) for k, v in ui.items() if k.startswith(('POST', MAP_AFTER))):.1f} "
          "wall s)")
    print(f"{'request':36s} {'median ms':>10s} {'p95 ms':>8s} {'max ms':>8s} {'CPU ms':>7s} "
          f"{'x /v1/nodes':>12s}")
    for name, ts in {**base, **ui}.items():
        s = sorted(ts)
        med = statistics.median(s)
        print(f"{name:36s} {1e3 * med:10.1f} {1e3 * s[int(0.95 * (len(s) - 1))]:8.1f} "
              f"{1e3 * s[-1]:8.1f} {1e3 * statistics.median(CPU[name]):7.1f} {med / ref:12.2f}")


if __name__ == "__main__":
    main()

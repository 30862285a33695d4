"""Controller and agent benchmarks. Run: .venv/bin/python bench/controller/run.py [--quick]

1. ingest: concurrent httpx clients against a real `minutiae serve` (dry-run backend):
   closed-loop max reports/s, then open-loop at the goal rate (2,000 reports/s = 20,000 nodes
   every 10 s) with p50/p99 latency; baseline: the same server's bare /v1/echo (token check
   and body read; no parsing, no controller work) at the same rate, as a ratio.
2. decision latency: report with a critical finding -> `scontrol update ... State=DRAIN`
   finished (audit done_time), p50/p99, on the real Slurm of $MINUTIAE_SLURM_CONF (nodes
   gpu009-gpu040); baseline: the bare `scontrol update` command, as a ratio.
3. reconcile replay: a week of 1,024 nodes at 60 s steps through the pure reconcile step;
   baseline: the same loop building the fleet state without reconciling.
4. agent footprint at a 10 s interval: CPU % of one core and RSS of a real `minutiae agent`
   checking a captured nvidia-smi XML; baseline: a bare Python interpreter's RSS.
Medians of several repeats are quoted; the machine is shared, so figures are conservative.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from minutiae.testing.serve import ServeProcess, free_port  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"
H = {"Authorization": f"Bearer {TOKEN}"}
REALDATA = ROOT.parent / "shared" / "realdata"


def report(i: int, critical: bool = False) -> dict:
    f = [{"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
          "message": "GPU has fallen off the bus", "pci": "0000:3b:00.0",
          "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has "
                  "fallen off the bus."}] if critical else []
    checks = [{"check": c, "status": "ok", "observed": 24, "findings": []}
              for c in ("ib", "pcie", "kernel_log")]
    checks.insert(0, {"check": "gpu", "status": "critical" if critical else "ok",
                      "observed": 96, "findings": f})
    return {"node": f"n{i:05d}", "status": "critical" if critical else "ok", "checks": checks,
            "domains": {"rack": f"r{i // 32:03d}", "leaf": f"l{i // 256:02d}",
                        "nvl_domain": f"nvl{i // 18:04d}"},
            "agent": {"version": "0.1.0", "seq": 1}}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


async def closed_loop(url: str, path: str, seconds: float, conc: int) -> tuple[float, list[float]]:
    lat: list[float] = []
    bodies = [report(i) for i in range(20_000)]
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(limits=limits, timeout=30) as c:
        async def worker(k: int) -> None:
            i = k
            while time.perf_counter() < stop:
                t = time.perf_counter()
                r = await c.post(url + path, json=bodies[i % len(bodies)], headers=H)
                lat.append(time.perf_counter() - t)
                assert r.status_code in (200, 202), r.text
                i += conc
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(conc)))
        return len(lat) / (time.perf_counter() - t0), lat


def _raw_requests(host: str, path: str, n: int) -> list[bytes]:
    out = []
    for i in range(n):
        body = json.dumps(report(i)).encode()
        out.append(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}"
                   f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                   .encode() + body)
    return out


async def raw_load(url: str, path: str, rate: float | None, seconds: float, conc: int,
                   total: int | None = None) -> tuple[float, list[float], int]:
    """A minimal keep-alive HTTP/1.1 load generator on asyncio streams (uvloop when present):
    ``conc`` connections; open loop at ``rate``/s (latency from the scheduled send time) or
    closed loop when ``rate`` is None. Costs far less CPU per request than an httpx client,
    which matters when client and server share two cores."""
    hostport = url.split("//", 1)[1]
    host, port = hostport.rsplit(":", 1)
    reqs = _raw_requests(hostport, path, 20_000)
    lat: list[float] = []
    errors = 0
    t0 = time.perf_counter()
    stop = t0 + seconds
    counter = iter(range(10**9))

    async def conn() -> None:
        nonlocal errors
        r, w = await asyncio.open_connection(host, int(port))
        try:
            while True:
                i = next(counter)
                if total is not None and i >= total:
                    return
                if rate is not None:
                    due = t0 + i / rate
                    if due >= stop:
                        return
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                else:
                    due = time.perf_counter()
                    if due >= stop:
                        return
                w.write(reqs[i % len(reqs)])
                head = await r.readuntil(b"\r\n\r\n")
                m = re.search(rb"content-length: *(\d+)", head, re.I)
                await r.readexactly(int(m.group(1)) if m else 0)
                if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.1 202")):
                    errors += 1
                lat.append(time.perf_counter() - due)
        finally:
            w.close()

    await asyncio.gather(*(conn() for _ in range(conc)))
    return len(lat) / (time.perf_counter() - t0), lat, errors


def _loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def run_async(coro):  # type: ignore[no-untyped-def]
    loop = _loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def bench_ingest(quick: bool) -> None:
    secs = 4.0 if quick else 8.0
    with tempfile.TemporaryDirectory() as tmp, ServeProcess(
            Path(tmp), TOKEN, "--backend", "dry-run", "--interval", "5") as ctl:
        run_async(raw_load(ctl.url, "/v1/reports", None, 600.0, 32, total=20_000))
        time.sleep(3)                                               # 20,000 nodes known
        print("\n== ingest: real minutiae serve (dry-run backend, 20,000 node names, 1 KB "
              "reports), load generator on the same 2 cores ==")
        print("-- httpx.AsyncClient, 32 concurrent, closed loop (median of 3; client-bound: "
              "httpx spends more CPU per request than the server) --")
        for path in ("/v1/echo", "/v1/reports"):
            runs = [run_async(closed_loop(ctl.url, path, secs / 2, 32)) for _ in range(3)]
            lat = [x for _, ls in runs for x in ls]
            print(f"{path:<12} {statistics.median(r for r, _ in runs):7.0f} req/s  p50 "
                  f"{1e3 * pct(lat, 50):7.1f} ms  p99 {1e3 * pct(lat, 99):7.1f} ms")
        print("-- raw keep-alive HTTP/1.1 generator, 32 connections (median of 3) --")
        best = {}
        for path in ("/v1/echo", "/v1/reports"):
            runs = [run_async(raw_load(ctl.url, path, None, secs, 32)) for _ in range(3)]
            lat = [x for _, ls, _ in runs for x in ls]
            best[path] = statistics.median(r for r, _, _ in runs)
            print(f"closed loop {path:<12} {best[path]:7.0f} req/s  p50 {1e3 * pct(lat, 50):6.1f}"
                  f" ms  p99 {1e3 * pct(lat, 99):6.1f} ms  errors {sum(e for *_, e in runs)}")
        print(f"  ratio reports/echo throughput: {best['/v1/reports'] / best['/v1/echo']:.2f}")
        for rate in (500.0, 1000.0, 2000.0):
            res = {}
            for path in ("/v1/echo", "/v1/reports"):
                runs = [run_async(raw_load(ctl.url, path, rate, secs, 64)) for _ in range(3)]
                lat = [x for _, ls, _ in runs for x in ls]
                res[path] = (statistics.median(r for r, _, _ in runs), pct(lat, 50), pct(lat, 99))
                print(f"open loop {rate:5.0f}/s {path:<12} achieved {res[path][0]:6.0f}/s  p50 "
                      f"{1e3 * res[path][1]:7.1f} ms  p99 {1e3 * res[path][2]:7.1f} ms  errors "
                      f"{sum(e for *_, e in runs)}")
            print(f"  ratio reports/echo p99 at {rate:.0f}/s: "
                  f"{res['/v1/reports'][2] / res['/v1/echo'][2]:.2f}")
        st = httpx.get(f"{ctl.url}/v1/status", timeout=30).json()
        print(f"controller: {st['nodes']} nodes, {st['counters']['reports']} reports accepted, "
              f"{st['counters']['rejected']} rejected, {st['counters']['steps']} reconcile steps")


def scontrol(conf: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "SLURM_CONF": conf})


def bench_decision(quick: bool) -> None:
    conf = os.environ.get("MINUTIAE_SLURM_CONF")
    print("\n== decision latency: critical report -> scontrol drain done ==")
    if not conf:
        print("skipped: MINUTIAE_SLURM_CONF unset (start Slurm with scripts/services/slurm-up.sh)")
        return
    nodes = [f"gpu{i:03d}" for i in range(9, 41)]
    trials = nodes[:8] if quick else nodes[:24]
    pol_text = (Path(ROOT / "src/minutiae/controller/default_policy.toml").read_text()
                .replace("dry_run = true", "dry_run = false")
                .replace("max_unavailable_fraction = 0.10", "max_unavailable_fraction = 0.9")
                .replace("per_minute = 10\n", "per_minute = 10000\n")
                .replace("rack = 2", "rack = 100").replace("leaf = 4", "leaf = 100")
                .replace("nvl_domain = 1", "nvl_domain = 100").replace("fraction = 0.10", "fraction = 1.0"))
    with tempfile.TemporaryDirectory() as tmp:
        pol = Path(tmp) / "policy.toml"
        pol.write_text(pol_text)
        for n in nodes:
            scontrol(conf, "update", f"NodeName={n}", "State=RESUME")
        with ServeProcess(Path(tmp) / "c", TOKEN, "--backend", "slurm", "--slurm-conf", conf,
                          "--policy", str(pol), "--interval", "5") as ctl, \
                httpx.Client(timeout=30) as c:
            for i, n in enumerate(nodes):
                b = report(i)
                b["node"] = n
                c.post(f"{ctl.url}/v1/reports", json=b, headers=H).raise_for_status()
            time.sleep(1)
            lat = []
            for k, n in enumerate(trials):
                b = report(k, critical=True)
                b["node"] = n
                t0 = time.time()
                c.post(f"{ctl.url}/v1/reports", json=b, headers=H).raise_for_status()
                done = None
                while done is None and time.time() - t0 < 30:
                    with sqlite3.connect(ctl.db, timeout=5) as db:
                        row = db.execute("SELECT done_time FROM audit WHERE node=? AND "
                                         "action='drain' AND status='done'", (n,)).fetchone()
                    done = row[0] if row else None
                    time.sleep(0.005)
                if done is not None:
                    lat.append(done - t0)
        base = []
        for n in trials:
            t = time.perf_counter()
            scontrol(conf, "update", f"NodeName={n}", "State=DRAIN", "Reason=minutiae: bench")
            base.append(time.perf_counter() - t)
        for n in nodes:
            scontrol(conf, "update", f"NodeName={n}", "State=RESUME")
    print(f"{len(lat)}/{len(trials)} drained; p50 {1e3 * statistics.median(lat):.0f} ms, "
          f"p99 {1e3 * pct(lat, 99):.0f} ms, max {1e3 * max(lat):.0f} ms")
    print(f"baseline bare `scontrol update State=DRAIN`: p50 {1e3 * statistics.median(base):.0f} ms"
          f"; ratio {statistics.median(lat) / statistics.median(base):.1f}x")


def bench_replay(quick: bool) -> None:
    from minutiae.actions.base import NodeSchedState, NodeState
    from minutiae.controller.policy import load_policy
    from minutiae.controller.reconcile import reconcile, simulate
    from minutiae.controller.state import FleetState, NodeView, Report
    from minutiae.model import Action, Finding, Severity, Status

    pol = load_policy()
    nvl = Finding("nvlink_down", Severity.ERROR, Action.RESET_GPU, "link 3 down")
    names = [f"n{i:04d}" for i in range(1024)]
    t0 = 1_700_000_000.0
    steps = (24 if quick else 7 * 24) * 60

    def run(do_reconcile: bool) -> tuple[float, int]:
        fleet = FleetState(nodes={n: NodeView(n, Report(n, t0, Status.OK),
                                              NodeState(n, NodeSchedState.AVAILABLE),
                                              {"rack": f"r{i // 16}"})
                                  for i, n in enumerate(names)})
        acted = 0
        start = time.perf_counter()
        for k in range(steps):
            now = t0 + 60.0 * k
            nodes = dict(fleet.nodes)
            bad = {names[(k // 90) * 7 % 1024], names[(k // 130) * 13 % 1024]}
            for n in bad | set(fleet.memory.nodes):
                nodes[n] = replace(nodes[n], report=Report(n, now, Status.OK,
                                                           (nvl,) if n in bad else ()))
            fleet = replace(fleet, nodes=nodes)
            if do_reconcile:
                plan = reconcile(fleet, pol, now)
                acted += len(plan.acting())
                fleet = simulate(fleet, plan)
        return time.perf_counter() - start, acted

    print(f"\n== reconcile replay: 1,024 nodes, {steps} steps of 60 s ==")
    # staleness is the policy's business: keep reports fresh by replaying with a long limit
    pol = replace(pol, stale_after_s=10 * 365 * 86400.0)
    base = statistics.median(run(False)[0] for _ in range(3))
    runs = [run(True) for _ in range(3)]
    t = statistics.median(r[0] for r in runs)
    print(f"reconcile: {t:.2f} s ({1e3 * t / steps:.2f} ms/step, {runs[0][1]} actions); "
          f"baseline state building only: {base:.2f} s; ratio {t / base:.1f}x")


def bench_agent(quick: bool) -> None:
    xml = REALDATA / "nvidia_smi/telegraf/a100-sxm4-v12.xml"
    kern = REALDATA / "kernel_logs/gpud/pkg_dmesg__dmesg.decode.iso.log.1"   # 250 KB real log
    print("\n== agent footprint at a 10 s interval (gpu from a captured nvidia-smi XML, "
          "ib+pcie from this /sys, kernel log from a 250 KB real dmesg, pushing to a real "
          "controller, scraped every 5 s) ==")
    for f in (xml, kern):
        if not f.exists():
            print(f"skipped: missing {f}")
            return
    secs = 30 if quick else 120
    with tempfile.TemporaryDirectory() as tmp, ServeProcess(
            Path(tmp) / "ctl", TOKEN, "--backend", "dry-run", "--interval", "2") as ctl:
        port = free_port()
        (Path(tmp) / "token").write_text(TOKEN)
        argv = [sys.executable, "-m", "minutiae.cli.main", "agent", "--node", "gpu099",
                "--controller", ctl.url, "--token-file", f"{tmp}/token",
                "--nvidia-smi-xml", str(xml), "--no-nvml", "--kmsg", str(kern),
                "--state-dir", f"{tmp}/s", "--metrics-listen", f"127.0.0.1:{port}",
                "--interval", "10"]
        agent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 cwd=tmp)
        bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        try:
            time.sleep(5)   # start-up (imports) is not steady state
            p = psutil.Process(agent.pid)
            c0, w0 = sum(p.cpu_times()[:2]), time.monotonic()
            rss = []
            for _ in range(int(secs / 5)):
                time.sleep(5)
                httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)  # one scrape per 5 s
                rss.append(p.memory_info().rss)
            cpu = (sum(p.cpu_times()[:2]) - c0) / (time.monotonic() - w0)
            bare_rss = psutil.Process(bare.pid).memory_info().rss
            pushed = httpx.get(f"{ctl.url}/v1/status", timeout=10).json()["counters"]["reports"]
        finally:
            agent.terminate()
            bare.terminate()
            agent.wait(10)
            bare.wait(10)
    print(f"agent: CPU {100 * cpu:.2f} % of one core over {secs} s (goal <= 0.5 %); RSS median "
          f"{statistics.median(rss) / 2**20:.1f} MiB, max {max(rss) / 2**20:.1f} MiB "
          f"(goal <= 40 MB); {pushed} reports pushed to a real controller")
    print(f"baseline bare python RSS {bare_rss / 2**20:.1f} MiB; ratio "
          f"{statistics.median(rss) / bare_rss:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="shorter runs")
    ap.add_argument("--only", choices=["ingest", "decision", "replay", "agent"])
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; python "
          f"{sys.version.split()[0]}")
    for name, fn in (("ingest", bench_ingest), ("decision", bench_decision),
                     ("replay", bench_replay), ("agent", bench_agent)):
        if a.only in (None, name):
            fn(a.quick)


if __name__ == "__main__":
    if re.search(r"\bpytest\b", " ".join(sys.argv)):
        raise SystemExit("benchmarks are not tests")
    main()

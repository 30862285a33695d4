"""Controller and agent benchmarks. Run: .venv/bin/python bench/controller/run.py [--quick]

1. ingest: `wrk` (C, closed loop, 32 connections) and a raw asyncio generator (open loop at
   1,000-3,000/s; the goal is 2,000 reports/s = 20,000 nodes every 10 s) against a real
   `minutiae serve` (dry-run backend), server and generator pinned to different cores; full
   reports and unchanged-report heartbeats; baseline: the same server's bare /v1/echo (token
   check and body read; no parsing, no controller work), as a ratio.
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
import json
import os
import re
import shutil
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

from loadgen import TOKEN, pct, pin, raw_load, run_async, wrk  # noqa: E402

from minutiae.testing.serve import ServeProcess, free_port  # noqa: E402

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


def bench_ingest(quick: bool) -> None:
    """wrk (C, closed loop) and the raw asyncio generator (open loop at fixed rates) against a
    real ``minutiae serve``; server and generator pinned to different cores when there are
    two or more. Three bodies: the bare echo, full reports, unchanged-report heartbeats."""
    if shutil.which("wrk") is None:
        print("\n== ingest: skipped: `wrk` not found (Debian: apt-get install wrk) ==")
        return
    secs = 4.0 if quick else 8.0
    cpus = sorted(os.sched_getaffinity(0))
    split = len(cpus) >= 2 and shutil.which("taskset") is not None
    gen_cpu = cpus[-1] if split else None
    with tempfile.TemporaryDirectory() as tmp, ServeProcess(
            Path(tmp), TOKEN, "--backend", "dry-run", "--interval", "5") as ctl:
        assert ctl.proc is not None
        if split:
            pin(ctl.proc.pid, cpus[0])
            os.sched_setaffinity(0, {cpus[-1]})
        full = [json.dumps(report(i)).encode() for i in range(20_000)]
        answers: dict[int, bytes] = {}
        run_async(raw_load(ctl.url, "/v1/reports", None, 600.0, 32, full, total=len(full),
                           answers=answers))
        beats = []
        for i in range(len(full)):
            d = json.loads(answers[i])["digest"]
            beats.append(json.dumps({"node": f"n{i:05d}", "digest": d,
                                     "agent": {"version": "0.1.0", "seq": 2}}).encode())
        files = {}
        for name, bodies in (("full", full), ("beat", beats)):
            files[name] = Path(tmp) / f"{name}.jsonl"
            files[name].write_bytes(b"\n".join(bodies) + b"\n")
        time.sleep(3)                                               # 20,000 nodes known
        where = (f"server on CPU {cpus[0]}, generator on CPU {cpus[-1]}" if split else
                 "server and generator sharing the CPUs")
        print(f"\n== ingest: real minutiae serve (dry-run backend, 20,000 node names, "
              f"{len(full[0])}-byte reports, {len(beats[0])}-byte heartbeats); {where} ==")
        kinds = (("echo", "/v1/echo", files["full"], full),
                 ("reports", "/v1/reports", files["full"], full),
                 ("heartbeats", "/v1/reports", files["beat"], beats))
        print("-- wrk, closed loop, 32 keep-alive connections (median of 3 runs) --")
        closed: dict[str, float] = {}
        for name, path, f, _ in kinds:
            runs = [wrk(ctl.url, path, f, secs, 32, gen_cpu) for _ in range(3)]
            med = {k: statistics.median(r[k] for r in runs) for k in ("rate", "p50_us", "p99_us")}
            closed[name] = med["rate"]
            bad = sum(r["non2xx"] + r["errors"] for r in runs)
            print(f"{name:<11} {med['rate']:7.0f} req/s  p50 {med['p50_us'] / 1e3:6.1f} ms  "
                  f"p99 {med['p99_us'] / 1e3:6.1f} ms  errors {bad}  (ratio to echo "
                  f"{med['rate'] / closed['echo']:.2f})", flush=True)
        print("-- open loop (raw asyncio generator, 64 connections, latency from the scheduled "
              "send time; median of 3 runs) --")
        server = psutil.Process(ctl.proc.pid)
        for rate in ((2000.0,) if quick else (1000.0, 2000.0, 3000.0)):
            res = {}
            for name, path, _, bodies in kinds:
                runs, cpu = [], []
                for _ in range(3):
                    c0, w0 = sum(server.cpu_times()[:2]), time.perf_counter()
                    runs.append(run_async(raw_load(ctl.url, path, rate, secs, 64, bodies)))
                    cpu.append((sum(server.cpu_times()[:2]) - c0) / (time.perf_counter() - w0))
                res[name] = {"rate": statistics.median(r for r, _, _ in runs),
                             "p50": statistics.median(pct(ls, 50) for _, ls, _ in runs),
                             "p99": statistics.median(pct(ls, 99) for _, ls, _ in runs)}
                print(f"{rate:5.0f}/s {name:<11} achieved {res[name]['rate']:6.0f}/s  p50 "
                      f"{1e3 * res[name]['p50']:7.1f} ms  p99 {1e3 * res[name]['p99']:7.1f} ms  "
                      f"server CPU {100 * statistics.median(cpu):3.0f} % of a core  errors "
                      f"{sum(e for *_, e in runs)}  (p99 ratio to echo "
                      f"{res[name]['p99'] / res['echo']['p99']:.2f})", flush=True)
        st = httpx.get(f"{ctl.url}/v1/status", timeout=30).json()
        c = st["counters"]
        print(f"controller: {st['nodes']} nodes, {c['reports']} reports accepted, "
              f"{c['rejected']} rejected, {c['steps']} reconcile steps (the last 100: longest "
              f"{c['max_step_ms']} ms, last {c['last_step_ms']} ms)")
        if split:
            os.sched_setaffinity(0, set(cpus))


def bench_gc(quick: bool) -> None:
    """In process: 20,000 nodes, then steps of 10,000 reports (full and heartbeats in turn),
    timing every cyclic-GC pause; with ``gc.freeze()`` after each step (what `minutiae serve`
    does) against without (baseline)."""
    import gc

    from minutiae.controller.policy import load_policy
    from minutiae.controller.service import Controller
    from minutiae.controller.store import Store
    from minutiae.schedulers.dryrun import DryRunBackend
    from minutiae.testing import FakeClock

    def run(freeze: bool) -> dict[int, list[float]]:
        pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
        started = [0.0]

        def cb(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                pauses[info["generation"]].append(time.perf_counter() - started[0])

        with tempfile.TemporaryDirectory() as tmp:
            clock = FakeClock()
            ctl = Controller(Store(Path(tmp) / "c.db"), DryRunBackend(), load_policy(), clock)
            bodies = [json.dumps(report(i)).encode() for i in range(20_000)]
            digest = [ctl.ingest_digest(json.loads(b), b)[1] for b in bodies]
            ctl.step()
            gc.collect()
            gc.callbacks.append(cb)
            try:
                for k in range(6 if quick else 24):
                    clock.advance(5)
                    for i in range(10_000):
                        j = (k * 10_000 + i) % 20_000
                        if k % 2:
                            ctl.ingest_digest({"node": f"n{j:05d}", "digest": digest[j]})
                        else:
                            ctl.ingest_digest(json.loads(bodies[j]), bodies[j])
                    ctl.step()
                    if freeze:
                        gc.freeze()
            finally:
                gc.callbacks.remove(cb)
                gc.unfreeze()
        return pauses

    print("\n== cyclic GC pauses: 20,000 nodes, steps of 10,000 reports (in process) ==")
    for name, freeze in (("without freeze (baseline)", False), ("gc.freeze() after each step",
                                                                True)):
        p = run(freeze)
        print(f"{name:<28} " + "  ".join(
            f"gen{g}: {len(v)} pauses, max {1e3 * max(v, default=0):5.1f} ms, total "
            f"{1e3 * sum(v):5.0f} ms" for g, v in p.items()), flush=True)


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
                .replace("nvl_domain = 1", "nvl_domain = 100").replace("fraction = 0.10", "fraction = 1.0")
                .replace('fleet_nodes = ""', 'fleet_nodes = "gpu0(09|[1-3][0-9]|40)"'))
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
    from minutiae.controller.policy import load_policy
    from minutiae.controller.reconcile import reconcile, simulate
    from minutiae.controller.state import FleetState, NodeView, Report
    from minutiae.model import Action, Finding, Severity, Status
    from minutiae.schedulers.base import NodeSchedState, NodeState

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
    ap.add_argument("--only", choices=["ingest", "gc", "decision", "replay", "agent"])
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; python "
          f"{sys.version.split()[0]}", flush=True)
    for name, fn in (("ingest", bench_ingest), ("gc", bench_gc), ("decision", bench_decision),
                     ("replay", bench_replay), ("agent", bench_agent)):
        if a.only in (None, name):
            fn(a.quick)


if __name__ == "__main__":
    if re.search(r"\bpytest\b", " ".join(sys.argv)):
        raise SystemExit("benchmarks are not tests")
    main()

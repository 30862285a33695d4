"""Scale-out ingest on PostgreSQL: a simulated fleet of N agents (lightweight report generators,
loopback only, bounded: a fixed number of seconds) against 2 ``minutiae serve`` replicas sharing
one PostgreSQL store, beside the baseline (1 replica on SQLite) measured in the same run.

Each agent sticks to one replica (node i -> replica i % 2), sends one full report, then either
unchanged-report heartbeats (the steady state) or full reports. Every report is answered only
once it is stored (acknowledge after store).

Pinning (the default with 2+ CPUs; ``--no-pin``: none): the replica being measured runs alone
on CPU ``--cpu`` (default 1; ``taskset -a``: every thread); the generator, the other replica
and the PostgreSQL backends serving the replicas' connections (found by client port in
``pg_stat_activity``; they end with the replicas, the server's other processes are left
alone) run on the other CPU. Each replica is
measured in turn: it takes ``--rate`` reports/s while the other takes ``--other-rate`` (both
at once, so the measured one also reads what the other stores).

Printed per replica: achieved reports/s, p50 / p99 latency (open loop: from the scheduled send
time), errors, server CPU seconds per wall second (the event loop's and the other threads'),
rows per store transaction and a write's wall and CPU time (waiting on the store vs on a core
or the GIL), how busy each CPU was (all processes: is the replica's core its own, is the
shared one saturated) and PostgreSQL's CPU; resident memory
per 10,000 nodes; the load average while measuring; the decision latency of a ``--storm``
of nodes turning critical at once (send -> audit row); and the projection to 100,000 nodes
(replica and PostgreSQL cores for 10,000 heartbeats/s and 4,000 full reports/s, replicas at
the measured per-replica rate, memory) from the per-replica figures measured in the run.
``--before SRC`` also runs the PostgreSQL pair from another checkout's ``src`` (the code
before a change) in the same run, as a ratio. ``--pyspy PATH`` records each measured replica
in its first full-report run (raw collapsed stacks, threads: ``PATH.<store>.<replica>``).

    MINUTIAE_PG_DSN=postgresql://… .venv/bin/python bench/controller/fleet20k.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psutil
import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen import TOKEN, _loop, pct, pg_backends, pin, print_parts, raw_load, thread_cpu  # noqa: E402
from run import report  # noqa: E402

from minutiae.controller.store import open_store  # noqa: E402
from minutiae.testing.serve import ServeProcess  # noqa: E402

H = {"Authorization": f"Bearer {TOKEN}"}


def fresh_dsn(base: str) -> str:
    name = "bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {name}")
    return f"{base}{'&' if '?' in base else '?'}options={quote(f'-csearch_path={name}')}"


def rss_mb(p: ServeProcess) -> float:
    assert p.proc is not None
    return float(psutil.Process(p.proc.pid).memory_info().rss) / 2**20


def cpu_s(p: ServeProcess) -> float:
    assert p.proc is not None
    return float(sum(psutil.Process(p.proc.pid).cpu_times()[:2]))


def busy() -> tuple[list[float], float]:
    """(busy CPU seconds of each CPU, CPU seconds of every PostgreSQL process so far)."""
    per = [t.user + t.nice + t.system + t.irq + t.softirq
           for t in psutil.cpu_times(percpu=True)]
    pg = 0.0
    for pr in psutil.process_iter(["name", "cpu_times"]):
        if pr.info["name"] in ("postgres", "postgresql") and pr.info["cpu_times"]:
            pg += pr.info["cpu_times"].user + pr.info["cpu_times"].system
    return per, pg


def counters(p: ServeProcess) -> dict[str, Any]:
    got: dict[str, Any] = httpx.get(f"{p.url}/v1/status", headers=H, timeout=60).json()
    return got


def seed(reps: list[ServeProcess], nodes: int) -> list[list[bytes]]:
    """One full report per node to its replica; returns each replica's heartbeat bodies."""
    beats: list[list[bytes]] = [[] for _ in reps]

    async def go() -> None:
        for k, r in enumerate(reps):
            mine = [i for i in range(nodes) if i % len(reps) == k]
            full = [json.dumps(report(i)).encode() for i in mine]
            answers: dict[int, bytes] = {}
            await raw_load(r.url, "/v1/reports", None, 600.0, 32, full, total=len(full),
                           answers=answers)
            for j, i in enumerate(mine):
                d = json.loads(answers[j])["digest"]
                beats[k].append(json.dumps({"node": f"n{i:05d}", "digest": d,
                                            "agent": {"version": "0.1.0", "seq": 2}}).encode())
    loop = _loop()
    loop.run_until_complete(go())
    loop.close()
    return beats


def measure(reps: list[ServeProcess], bodies: list[list[bytes]], k: int, rate: float,
            other: float, secs: float, pyspy: str | None, conns: int, cpu: int = 0
            ) -> dict[str, float]:
    """Open loop: ``rate``/s on replica ``k`` and ``other``/s on the rest, at once, over
    ``conns`` keep-alive connections per replica (a report waits for a free one)."""
    c0, s0, (b0, pg0) = cpu_s(reps[k]), counters(reps[k])["counters"], busy()
    t0 = thread_cpu(reps[k].proc.pid)  # type: ignore[union-attr]
    spy = None
    if pyspy and shutil.which("py-spy") and reps[k].proc is not None:
        spy = subprocess.Popen(["py-spy", "record", "-p", str(reps[k].proc.pid), "--threads",
                                "-f", "raw", "-d", str(int(secs)), "-r", "200", "-o", pyspy],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    w0 = time.perf_counter()

    async def go() -> list[tuple[float, list[float], int]]:
        return list(await asyncio.gather(*(
            raw_load(r.url, "/v1/reports", rate if j == k else other, secs, conns, b)
            for j, (r, b) in enumerate(zip(reps, bodies, strict=True)) if j == k or other > 0)))
    loop = _loop()
    got = loop.run_until_complete(go())
    loop.close()
    wall = time.perf_counter() - w0
    if spy is not None:
        spy.wait(60)
    b1, pg1 = busy()
    t1 = thread_cpu(reps[k].proc.pid)  # type: ignore[union-attr]
    st1 = counters(reps[k])
    s1 = st1["counters"]
    parts = {f"part/{n}/{m}": v[f"{m}_ms"] for n, v in st1.get("latency", {}).items()
             for m in ("p50", "p99", "max")}
    parts.update({f"part/{n}/n": v["n"] for n, v in st1.get("latency", {}).items()})
    d = {m: s1.get(m, 0) - s0.get(m, 0) for m in ("store_writes", "reports_stored",
                                                  "store_write_s", "store_write_cpu_s")}
    writes = max(d["store_writes"], 1)
    g = got[k] if other > 0 else got[0]
    return {"rate": g[0], "p50": pct(g[1], 50), "p99": pct(g[1], 99), "errors": g[2],
            "cpu": (cpu_s(reps[k]) - c0) / wall, "rows_per_write": d["reports_stored"] / writes,
            "loop": (t1[0] - t0[0]) / wall, "threads": (t1[1] - t0[1]) / wall,
            "write_ms": 1e3 * d["store_write_s"] / writes,
            "write_cpu_ms": 1e3 * d["store_write_cpu_s"] / writes,
            "own": (b1[cpu] - b0[cpu]) / wall, "shared": (b1[1 - cpu] - b0[1 - cpu]) / wall,
            "pg": (pg1 - pg0) / wall, "total": sum(x[0] for x in got), **parts}


def run(label: str, store_args: list[list[str]], nodes: int, a: argparse.Namespace,
        tmp: Path, src: str | None = None) -> dict[str, float]:
    env = {"MINUTIAE_LOG_JSON": "0", **({"PYTHONPATH": src} if src else {})}
    reps: list[ServeProcess] = []
    try:   # a replica that fails to start stops the ones already up (none is left behind
        # holding the leader lock)
        for k, sa in enumerate(store_args):
            reps.append(ServeProcess(tmp / f"{label[:12].replace(' ', '_')}-{k}", TOKEN, *sa,
                                     "--backend", "dry-run", "--interval", "2", env=env))
            reps[-1].start(timeout_s=120.0)
        base = [rss_mb(r) for r in reps]
        beats = seed(reps, nodes)
        full = [[json.dumps(report(i)).encode() for i in range(nodes) if i % len(reps) == k]
                for k in range(len(reps))]
        time.sleep(5)  # two steps: each replica has read what the other stored
        seen = [counters(r) for r in reps]
        mem = [rss_mb(r) - b for r, b in zip(reps, base, strict=True)]
        loads = [os.getloadavg()[0]]
        out: dict[str, float] = {}
        for k in range(len(reps)):
            if a.pin:
                pin(reps[k].proc.pid, a.cpu)  # type: ignore[union-attr]
                for j, r in enumerate(reps):
                    if j != k:
                        pin(r.proc.pid, 1 - a.cpu)  # type: ignore[union-attr]
                if store_args[0]:   # the PostgreSQL backends serving the replicas
                    for b in pg_backends([r.proc.pid for r in reps],  # type: ignore[misc]
                                         a.dsn):
                        try:
                            os.sched_setaffinity(b, {1 - a.cpu})
                        except (PermissionError, ProcessLookupError):
                            print(f"PostgreSQL backend {b} not pinned", flush=True)
            for kind, bodies in (("heartbeats", beats), ("full reports", full)):
                res = [measure(reps, bodies, k, a.rate, a.other_rate, a.secs,
                               f"{a.pyspy}.{label.split()[-1].lower()}.{k}" if (
                                   a.pyspy and i == 0 and kind == "full reports") else None,
                               a.conns, a.cpu if a.pin else 0)
                       for i in range(a.runs)]
                loads.append(os.getloadavg()[0])
                med = {m: statistics.median(r.get(m, 0.0) for r in res)
                       for m in set().union(*res)}
                runs = ", ".join(f"{1e3 * r['p99']:.0f}" for r in res)
                print(f"{label:<24} replica {k} {kind:<12} {med['rate']:6.0f} reports/s "
                      f"({1e6 * med['cpu'] / max(med['rate'], 1.0):.0f} us CPU each)  p50 "
                      f"{1e3 * med['p50']:6.1f} ms  p99 {1e3 * med['p99']:6.1f} ms (runs: "
                      f"{runs})  errors "
                      f"{med['errors']:.0f}  server {med['cpu']:.2f} CPU s/s  "
                      f"(event loop {med['loop']:.2f}, other threads {med['threads']:.2f})  "
                      f"{med['rows_per_write']:.1f} rows/write, a write {med['write_ms']:.1f} "
                      f"ms wall ({med['write_cpu_ms']:.2f} ms CPU); CPU busy: its own "
                      f"{med['own']:.2f}, the shared one {med['shared']:.2f}; PostgreSQL "
                      f"{med['pg']:.2f} CPU s/s", flush=True)
                print_parts(label, k, kind, med)
                out[f"{kind}/{k}/rate"] = med["rate"]
                out[f"{kind}/{k}/p99"] = med["p99"]
                out[f"{kind}/{k}/cpu_per"] = med["cpu"] / max(med["rate"], 1.0)
                out[f"{kind}/{k}/pg_per"] = med["pg"] / max(med["total"], 1.0)
        if a.storm:
            out.update(storm(reps, store_args, nodes, a.storm))
        per10k = statistics.median(mem) / nodes * 10_000
        for k, r in enumerate(reps):
            print(f"{label:<24} replica {k}: role {seen[k].get('role')} epoch "
                  f"{seen[k].get('epoch')}, {seen[k].get('nodes')} nodes known, RSS "
                  f"{rss_mb(r):.0f} MB ({mem[k]:.0f} MB over its empty start)")
        print(f"{label:<24} memory per 10,000 nodes {per10k:.0f} MB; projection to 100,000 "
              f"nodes: {statistics.median(base) + 10 * per10k:.0f} MB per replica; load "
              f"average while measuring: median {statistics.median(loads):.2f} (max "
              f"{max(loads):.2f}) on {os.cpu_count()} CPUs", flush=True)
        out["per10k"] = per10k
        out["at100k"] = statistics.median(base) + 10 * per10k
        return out
    finally:
        for r in reps:
            r.stop()


def storm(reps: list[ServeProcess], store_args: list[list[str]], nodes: int, n: int
          ) -> dict[str, float]:
    """``n`` nodes turn critical at once (each report to its own replica, 64 connections per
    replica): time from each report's send to its decision (drain or hold) in the audit log."""
    for r in reps:
        if r.proc is not None:   # every replica may use both CPUs for this part
            subprocess.run(["taskset", "-a", "-cp", "0,1", str(r.proc.pid)], check=False,
                           stdout=subprocess.DEVNULL)
    picked = [i * (nodes // n) for i in range(n)]
    sent: dict[str, float] = {}

    async def go() -> None:
        async def one(k: int) -> None:
            mine = [i for i in picked if i % len(reps) == k]
            bodies = [json.dumps(report(i, critical=True)).encode() for i in mine]
            for i in mine:
                sent[f"n{i:05d}"] = time.time()
            await raw_load(reps[k].url, "/v1/reports", None, 120.0, 64, bodies,
                           total=len(bodies))
        await asyncio.gather(*(one(k) for k in range(len(reps))))
    t0 = time.time()
    loop = _loop()
    loop.run_until_complete(go())
    loop.close()
    where = store_args[0][1] if store_args[0] else str(reps[0].db)
    st = open_store(where, identity="bench-reader", pool=1)
    decided: dict[str, float] = {}
    while len(decided) < n and time.time() - t0 < 120:
        for node in sent.keys() - decided.keys():
            rows = st.audit(node=node, limit=5)
            if rows:
                decided[node] = min(r.time for r in rows)
        time.sleep(0.2)
    st.close()
    lat = sorted(decided[k] - sent[k] for k in decided)
    kinds = httpx.get(f"{reps[0].url}/v1/status", headers=H, timeout=60).json()
    print(f"storm: {n} nodes critical at once; decided {len(lat)}/{n}: decision latency p50 "
          f"{1e3 * pct(lat, 50):.0f} ms, p99 {1e3 * pct(lat, 99):.0f} ms, max "
          f"{1e3 * lat[-1] if lat else float('nan'):.0f} ms (send -> audit row); pause "
          f"{kinds.get('paused')}; load {os.getloadavg()[0]:.2f}", flush=True)
    return {"storm/p50": pct(lat, 50), "storm/p99": pct(lat, 99)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nodes", type=int, default=20_000)
    ap.add_argument("--rate", type=float, default=2000.0, help="reports/s, measured replica")
    ap.add_argument("--other-rate", type=float, default=2000.0,
                    help="reports/s on the other replica meanwhile (0: idle)")
    ap.add_argument("--secs", type=float, default=6.0)
    ap.add_argument("--conns", type=int, default=256,
                    help="connections per replica (agents are many; 64 caps the rate at "
                         "64 / latency)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-pin", dest="pin", action="store_false")
    ap.add_argument("--cpu", type=int, choices=(0, 1), default=1,
                    help="the measured replica's CPU; everything else (generator, the other "
                         "replica, the replicas' PostgreSQL backends) runs on the other one")
    ap.add_argument("--before", help="another checkout's src/: its PostgreSQL pair too")
    ap.add_argument("--only", choices=("sqlite", "postgresql"))
    ap.add_argument("--pyspy", help="raw py-spy profiles of each replica's first full-report "
                                    "run: PATH.<store>.<replica>")
    ap.add_argument("--storm", type=int, default=500,
                    help="then this many nodes turn critical at once (0: skip)")
    a = ap.parse_args()
    dsn = os.environ.get("MINUTIAE_PG_DSN")
    if not dsn:
        sys.exit("fleet20k: MINUTIAE_PG_DSN unset (scripts/services/postgres-up.sh)")
    a.pin = a.pin and len(os.sched_getaffinity(0)) >= 2 and shutil.which("taskset") is not None
    nodes = 4_000 if a.quick else a.nodes
    a.secs = 3.0 if a.quick else a.secs
    a.dsn = dsn
    if a.pin:
        os.sched_setaffinity(0, {1 - a.cpu})   # the generator (this process)
    print(f"== fleet: {nodes} simulated agents; measured replica {a.rate:.0f} reports/s"
          f"{f' pinned alone to CPU {a.cpu}' if a.pin else ''}, the other {a.other_rate:.0f}/s"
          f"{f' on CPU {1 - a.cpu} with the generator and PostgreSQL' if a.pin else ''}; "
          f"{a.secs:g} s x {a.runs} runs "
          f"(median); loopback; load {os.getloadavg()[0]:.2f} ==", flush=True)
    res: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        if a.only != "postgresql":
            res["sqlite"] = run("baseline: 1 x SQLite", [[]], nodes, a, tmp)
            if a.before:
                res["sqlite-before"] = run("before: 1 x SQLite", [[]], nodes, a, tmp,
                                           src=a.before)
        if a.only != "sqlite":
            res["pg"] = run("2 replicas PostgreSQL", [["--store", fresh_dsn(dsn)]] * 2, nodes,
                            a, tmp)
        if a.before and a.only != "sqlite":
            res["before"] = run("before: 2 x PostgreSQL", [["--store", fresh_dsn(dsn)]] * 2,
                                nodes, a, tmp, src=a.before)
    ratios(res)
    project(res.get("pg"))



#: NVSentinel's scale target (issue 17): 100,000 nodes, a heartbeat per node every 10 s and
#: bursts of full reports
FLEET, BEATS_S, BURST_S = 100_000, 10_000.0, 4_000.0


def project(pg: dict[str, float] | None) -> None:
    """The projection to 100,000 nodes from the per-replica figures measured above."""
    if pg is None:
        return
    med: dict[str, float] = {}
    for kind in ("heartbeats", "full reports"):
        for m in ("rate", "p99", "cpu_per", "pg_per"):
            med[f"{kind}/{m}"] = statistics.median(pg[f"{kind}/{k}/{m}"] for k in (0, 1))
    hb, fr = med["heartbeats/cpu_per"], med["full reports/cpu_per"]
    reps = max(BEATS_S / med["heartbeats/rate"], BURST_S / med["full reports/rate"])
    print(f"projection to {FLEET:,} nodes ({BEATS_S:,.0f} heartbeats/s, bursts of "
          f"{BURST_S:,.0f} full reports/s), from the PostgreSQL replicas measured above: "
          f"{1e6 * hb:.0f} us of replica CPU per heartbeat, {1e6 * fr:.0f} per full report -> "
          f"{BEATS_S * hb:.1f} cores for the heartbeats, {BURST_S * fr:.1f} for a burst; at "
          f"the {med['heartbeats/rate']:,.0f} / {med['full reports/rate']:,.0f} reports/s "
          f"measured per replica (p99 {1e3 * med['heartbeats/p99']:.0f} / "
          f"{1e3 * med['full reports/p99']:.0f} ms) that is {reps:.2f} replicas (rounded up: "
          f"{-int(-reps // 1)}); PostgreSQL {1e6 * med['heartbeats/pg_per']:.0f} / "
          f"{1e6 * med['full reports/pg_per']:.0f} us CPU per heartbeat / full report -> "
          f"{BEATS_S * med['heartbeats/pg_per']:.1f} cores at {BEATS_S:,.0f}/s; memory "
          f"{pg['at100k']:.0f} MB per replica (goal <= 2,048)", flush=True)
    if "storm/p50" in pg:
        print(f"decision latency under the storm (measured, not projected: a step's cost "
              f"grows with what changed): p50 {1e3 * pg['storm/p50']:.0f} ms, p99 "
              f"{1e3 * pg['storm/p99']:.0f} ms", flush=True)


def ratios(res: dict[str, dict[str, float]]) -> None:
    for new, old in (("sqlite", "sqlite-before"), ("pg", "sqlite"), ("pg", "before")):
        pg, b = res.get(new), res.get(old)
        if pg is None or b is None:
            continue
        name = old if new == "pg" else "before (SQLite)"
        if new == "sqlite":
            for kind in ("heartbeats", "full reports"):
                print(f"ratio {kind:<12} SQLite / before: rate "
                      f"{pg[f'{kind}/0/rate'] / b[f'{kind}/0/rate']:.2f}, p99 "
                      f"{pg[f'{kind}/0/p99'] / b[f'{kind}/0/p99']:.2f}, server CPU per report "
                      f"{pg[f'{kind}/0/cpu_per'] / b[f'{kind}/0/cpu_per']:.2f}")
            continue
        for kind in ("heartbeats", "full reports"):
            for k in (0, 1):
                bk = f"{kind}/{min(k, 1 if name == 'before' else 0)}"
                print(f"ratio {kind:<12} replica {k} / {name}: rate "
                      f"{pg[f'{kind}/{k}/rate'] / b[f'{bk}/rate']:.2f}, p99 "
                      f"{pg[f'{kind}/{k}/p99'] / b[f'{bk}/p99']:.2f}, server CPU per report "
                      f"{pg[f'{kind}/{k}/cpu_per'] / b[f'{bk}/cpu_per']:.2f}")
        print(f"ratio memory per 10,000 nodes PostgreSQL/{name}: "
              f"{pg['per10k'] / b['per10k']:.2f}")


if __name__ == "__main__":
    main()

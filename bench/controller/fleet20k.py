"""Scale-out ingest on PostgreSQL: a simulated fleet of N agents (lightweight report generators,
loopback only, bounded: a fixed number of seconds) against 2 ``minutiae serve`` replicas sharing
one PostgreSQL store, beside the baseline (1 replica on SQLite) measured in the same run.

Each agent sticks to one replica (node i -> replica i % 2), sends one full report, then either
unchanged-report heartbeats (the steady state) or full reports. Every report is answered only
once it is stored (acknowledge after store).

Pinning (``--pin``, the default with 2+ CPUs): the replica being measured runs alone on CPU 0
(``taskset -a``: every thread); the generator, the other replica and the SQLite baseline's
nothing-else run on CPU 1; PostgreSQL (a shared service) is not pinned. Each replica is
measured in turn: it takes ``--rate`` reports/s while the other takes ``--other-rate`` (both
at once, so the measured one also reads what the other stores).

Printed per replica: achieved reports/s, p50 / p99 latency (open loop: from the scheduled send
time), errors, server CPU seconds per wall second, rows per store transaction; resident memory
per 10,000 nodes and the projection to 100,000 nodes; the load average while measuring.
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

from loadgen import TOKEN, _loop, pct, pin, raw_load  # noqa: E402
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
            other: float, secs: float, pyspy: str | None, conns: int) -> dict[str, float]:
    """Open loop: ``rate``/s on replica ``k`` and ``other``/s on the rest, at once, over
    ``conns`` keep-alive connections per replica (a report waits for a free one)."""
    c0, s0 = cpu_s(reps[k]), counters(reps[k])["counters"]
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
    s1 = counters(reps[k])["counters"]
    writes = s1.get("store_writes", 0) - s0.get("store_writes", 0)
    rows = s1.get("reports_stored", 0) - s0.get("reports_stored", 0)
    g = got[k] if other > 0 else got[0]
    return {"rate": g[0], "p50": pct(g[1], 50), "p99": pct(g[1], 99), "errors": g[2],
            "cpu": (cpu_s(reps[k]) - c0) / wall, "rows_per_write": rows / writes if writes else 0}


def run(label: str, store_args: list[list[str]], nodes: int, a: argparse.Namespace,
        tmp: Path, src: str | None = None) -> dict[str, float]:
    env = {"MINUTIAE_LOG_JSON": "0", **({"PYTHONPATH": src} if src else {})}
    reps = [ServeProcess(tmp / f"{label[:12].replace(' ', '_')}-{k}", TOKEN, *sa, "--backend",
                         "dry-run", "--interval", "2", env=env).start()
            for k, sa in enumerate(store_args)]
    try:
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
                pin(reps[k].proc.pid, 0)  # type: ignore[union-attr]
                for j, r in enumerate(reps):
                    if j != k:
                        pin(r.proc.pid, 1)  # type: ignore[union-attr]
            for kind, bodies in (("heartbeats", beats), ("full reports", full)):
                res = [measure(reps, bodies, k, a.rate, a.other_rate, a.secs,
                               f"{a.pyspy}.{label.split()[-1].lower()}.{k}" if (
                                   a.pyspy and i == 0 and kind == "full reports") else None,
                               a.conns)
                       for i in range(a.runs)]
                loads.append(os.getloadavg()[0])
                med = {m: statistics.median(r[m] for r in res) for m in res[0]}
                runs = ", ".join(f"{1e3 * r['p99']:.0f}" for r in res)
                print(f"{label:<24} replica {k} {kind:<12} {med['rate']:6.0f} reports/s  p50 "
                      f"{1e3 * med['p50']:6.1f} ms  p99 {1e3 * med['p99']:6.1f} ms (runs: "
                      f"{runs})  errors "
                      f"{med['errors']:.0f}  server {med['cpu']:.2f} CPU s/s  "
                      f"{med['rows_per_write']:.1f} rows/write", flush=True)
                out[f"{kind}/{k}/rate"] = med["rate"]
                out[f"{kind}/{k}/p99"] = med["p99"]
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
    if a.pin:
        os.sched_setaffinity(0, {1})   # the generator (this process) on CPU 1
    print(f"== fleet: {nodes} simulated agents; measured replica {a.rate:.0f} reports/s"
          f"{' pinned alone to CPU 0' if a.pin else ''}, the other {a.other_rate:.0f}/s"
          f"{' on CPU 1 with the generator' if a.pin else ''}; {a.secs:g} s x {a.runs} runs "
          f"(median); loopback; load {os.getloadavg()[0]:.2f} ==", flush=True)
    res: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        if a.only != "postgresql":
            res["sqlite"] = run("baseline: 1 x SQLite", [[]], nodes, a, tmp)
        if a.only != "sqlite":
            res["pg"] = run("2 replicas PostgreSQL", [["--store", fresh_dsn(dsn)]] * 2, nodes,
                            a, tmp)
        if a.before and a.only != "sqlite":
            res["before"] = run("before: 2 x PostgreSQL", [["--store", fresh_dsn(dsn)]] * 2,
                                nodes, a, tmp, src=a.before)
    ratios(res)


def ratios(res: dict[str, dict[str, float]]) -> None:
    pg = res.get("pg")
    for name in ("sqlite", "before"):
        b = res.get(name)
        if pg is None or b is None:
            continue
        for kind in ("heartbeats", "full reports"):
            for k in (0, 1):
                bk = f"{kind}/{min(k, 1 if name == 'before' else 0)}"
                print(f"ratio {kind:<12} replica {k} / {name}: rate "
                      f"{pg[f'{kind}/{k}/rate'] / b[f'{bk}/rate']:.2f}, p99 "
                      f"{pg[f'{kind}/{k}/p99'] / b[f'{bk}/p99']:.2f}")
        print(f"ratio memory per 10,000 nodes PostgreSQL/{name}: "
              f"{pg['per10k'] / b['per10k']:.2f}")


if __name__ == "__main__":
    main()

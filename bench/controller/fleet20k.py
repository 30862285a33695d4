"""Scale-out ingest on PostgreSQL: a simulated fleet of N agents (lightweight report generators,
loopback only, bounded: a fixed number of requests or seconds) against 2 ``minutiae serve``
replicas sharing one PostgreSQL store, side by side with the baseline (1 replica on SQLite)
run in the same process.

Each agent sticks to one replica (node i -> replica i % 2), sends one full report, then
unchanged-report heartbeats (the steady state). Printed per replica: achieved reports/s, p50 /
p99 latency (open loop: from the scheduled send time), errors, server CPU; resident memory per
10,000 nodes (both replicas hold the whole fleet: each reads what the other stored); the
projection to 100,000 nodes; the machine load while measuring.

    MINUTIAE_PG_DSN=postgresql://… .venv/bin/python bench/controller/fleet20k.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx
import psutil
import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen import TOKEN, _loop, pct, raw_load  # noqa: E402
from run import report  # noqa: E402

from minutiae.testing.serve import ServeProcess  # noqa: E402


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


def measure(reps: list[ServeProcess], bodies: list[list[bytes]], rate: float, secs: float
            ) -> list[dict[str, float]]:
    """Open loop at ``rate``/s on every replica at once."""
    c0 = [cpu_s(r) for r in reps]
    w0 = time.perf_counter()

    async def go() -> list[tuple[float, list[float], int]]:
        return list(await asyncio.gather(*(raw_load(r.url, "/v1/reports", rate, secs, 64, b)
                                           for r, b in zip(reps, bodies, strict=True))))
    loop = _loop()
    got = loop.run_until_complete(go())
    loop.close()
    wall = time.perf_counter() - w0
    return [{"rate": g[0], "p50": pct(g[1], 50), "p99": pct(g[1], 99), "errors": g[2],
             "cpu": (cpu_s(r) - c) / wall} for g, r, c in zip(got, reps, c0, strict=True)]


def run(label: str, store_args: list[list[str]], nodes: int, rate: float, secs: float,
        tmp: Path) -> dict[str, float]:
    reps = [ServeProcess(tmp / f"{label}-{k}", TOKEN, *a, "--backend", "dry-run",
                         "--interval", "2", env={"MINUTIAE_LOG_JSON": "0"}).start()
            for k, a in enumerate(store_args)]
    try:
        base = [rss_mb(r) for r in reps]
        beats = seed(reps, nodes)
        full = [[json.dumps(report(i)).encode() for i in range(nodes) if i % len(reps) == k]
                for k in range(len(reps))]
        time.sleep(5)  # two steps: each replica has read what the other stored
        seen = [httpx.get(f"{r.url}/v1/status", headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=60).json() for r in reps]
        mem = [rss_mb(r) - b for r, b in zip(reps, base, strict=True)]
        load0 = os.getloadavg()[0]
        out: dict[str, float] = {}
        for kind, bodies in (("heartbeats", beats), ("full reports", full)):
            res = [measure(reps, bodies, rate, secs) for _ in range(3)]
            for k in range(len(reps)):
                med = {m: statistics.median(r[k][m] for r in res)
                       for m in ("rate", "p50", "p99", "errors", "cpu")}
                print(f"{label:<22} replica {k} {kind:<12} {med['rate']:6.0f} reports/s  p50 "
                      f"{1e3 * med['p50']:6.1f} ms  p99 {1e3 * med['p99']:6.1f} ms  errors "
                      f"{med['errors']:.0f}  server CPU {100 * med['cpu']:3.0f} % of a core",
                      flush=True)
                out[f"{kind}/{k}/rate"] = med["rate"]
                out[f"{kind}/{k}/p99"] = med["p99"]
        load = (load0 + os.getloadavg()[0]) / 2
        per10k = statistics.median(mem) / nodes * 10_000
        for k, r in enumerate(reps):
            print(f"{label:<22} replica {k}: role {seen[k].get('role')} epoch "
                  f"{seen[k].get('epoch')}, {seen[k].get('nodes')} nodes known, RSS "
                  f"{rss_mb(r):.0f} MB ({mem[k]:.0f} MB over its empty start)")
        print(f"{label:<22} memory per 10,000 nodes {per10k:.0f} MB; projection to 100,000 "
              f"nodes: {statistics.median(base) + 10 * per10k:.0f} MB per replica; load "
              f"average while measuring {load:.2f} on {os.cpu_count()} CPUs", flush=True)
        out["per10k"] = per10k
        return out
    finally:
        for r in reps:
            r.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nodes", type=int, default=20_000)
    ap.add_argument("--rate", type=float, default=2000.0, help="reports/s per replica")
    a = ap.parse_args()
    dsn = os.environ.get("MINUTIAE_PG_DSN")
    if not dsn:
        sys.exit("fleet20k: MINUTIAE_PG_DSN unset (scripts/services/postgres-up.sh)")
    nodes = 4_000 if a.quick else a.nodes
    secs = 3.0 if a.quick else 6.0
    print(f"== fleet: {nodes} simulated agents, open loop {a.rate:.0f} reports/s per replica, "
          f"{secs:g} s x 3 runs (median); loopback; load {os.getloadavg()[0]:.2f} ==")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        base = run("baseline: 1 x SQLite", [[]], nodes, a.rate, secs, tmp)
        pg = run("2 replicas PostgreSQL", [["--store", fresh_dsn(dsn)]] * 2, nodes, a.rate,
                 secs, tmp)
    for kind in ("heartbeats", "full reports"):
        b = base[f"{kind}/0/p99"]
        for k in (0, 1):
            print(f"ratio {kind:<12} replica {k} / baseline: rate "
                  f"{pg[f'{kind}/{k}/rate'] / base[f'{kind}/0/rate']:.2f}, p99 "
                  f"{pg[f'{kind}/{k}/p99'] / b:.2f}")
    print(f"ratio memory per 10,000 nodes PostgreSQL/SQLite: {pg['per10k'] / base['per10k']:.2f}")


if __name__ == "__main__":
    main()

"""Load generation for the controller benchmarks (``run.py``): a raw asyncio HTTP/1.1
generator (open or closed loop), ``wrk`` runs, CPU pinning and percentiles."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from pathlib import Path

TOKEN = "bench-token-0123456789abcdef"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def _raw_requests(host: str, path: str, bodies: list[bytes]) -> list[bytes]:
    out = []
    for body in bodies:
        out.append(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}"
                   f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                   .encode() + body)
    return out


async def raw_load(url: str, path: str, rate: float | None, seconds: float, conc: int,
                   bodies: list[bytes], total: int | None = None,
                   answers: dict[int, bytes] | None = None) -> tuple[float, list[float], int]:
    """A minimal keep-alive HTTP/1.1 load generator on asyncio streams (uvloop when present):
    ``conc`` connections; open loop at ``rate``/s (latency from the scheduled send time) or
    closed loop when ``rate`` is None. Costs far less CPU per request than an httpx client,
    which matters when client and server share two cores."""
    hostport = url.split("//", 1)[1]
    host, port = hostport.rsplit(":", 1)
    reqs = _raw_requests(hostport, path, bodies)
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
                ans = await r.readexactly(int(m.group(1)) if m else 0)
                if answers is not None:
                    answers[i] = ans
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


def pin(pid: int, cpu: int) -> None:
    """Every thread of ``pid`` onto ``cpu`` (``taskset -a``: threads started later inherit)."""
    subprocess.run(["taskset", "-a", "-cp", str(cpu), str(pid)], check=True,
                   stdout=subprocess.DEVNULL)


def wrk(url: str, path: str, bodies: Path, seconds: float, conns: int,
        cpu: int | None) -> dict[str, float]:
    """One closed-loop wrk run (``conns`` keep-alive connections, one wrk thread)."""
    argv = ["wrk", "-t1", f"-c{conns}", f"-d{seconds:g}s", "--timeout", "10s", "-s",
            str(Path(__file__).with_name("wrk_post.lua")), url]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=True,
                         env={**os.environ, "BENCH_TOKEN": TOKEN, "BENCH_PATH": path,
                              "BENCH_BODIES": str(bodies)})
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["rate"] = res["requests"] / (res["duration_us"] / 1e6)
    return res


def pg_backends(pids: list[int], dsn: str) -> list[int]:
    """The PostgreSQL backend processes serving the TCP connections of ``pids`` (their client
    ports, matched in ``pg_stat_activity``): the store work those processes cause."""
    import psutil
    import psycopg

    ports = [c.laddr.port for p in pids for c in psutil.Process(p).net_connections("tcp")
             if c.raddr and c.status == psutil.CONN_ESTABLISHED]
    if not ports:
        return []
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute("SELECT pid FROM pg_stat_activity WHERE client_port = ANY(%s)",
                         (ports,)).fetchall()
    return [int(r[0]) for r in rows]


def thread_cpu(pid: int) -> tuple[float, float]:
    """(CPU seconds of ``pid``'s main thread — the HTTP event loop —, of all its others)."""
    import psutil

    main = other = 0.0
    for t in psutil.Process(pid).threads():
        if t.id == pid:
            main += t.user_time + t.system_time
        else:
            other += t.user_time + t.system_time
    return main, other


def print_parts(label: str, k: int, kind: str, med: dict[str, float]) -> None:
    """Where the measured replica's report latency went (its ``/v1/status`` latency parts,
    medians over the runs): p50 / p99 / max ms of each part."""
    names = [n for n in ("queue", "linger", "write", "handoff", "resume", "send", "server",
                         "gc", "gc2", "step") if f"part/{n}/p50" in med]
    if names:
        print(f"{label:<24} replica {k} {kind:<12} parts p50/p99/max ms: " + "; ".join(
            f"{n} {med[f'part/{n}/p50']:.1f}/{med[f'part/{n}/p99']:.1f}/"
            f"{med[f'part/{n}/max']:.1f}" + (f" (x{med[f'part/{n}/n']:.0f})"
                                             if n in ("gc", "gc2", "step") else "")
            for n in names), flush=True)

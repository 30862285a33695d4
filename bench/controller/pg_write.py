"""The client CPU of one PostgreSQL group commit (``PgStore.save_reports``: a take of N
reports in one statement), with its arrays sent in binary (the store's way) against the same
statement with text arrays (psycopg's text-array dumper escapes every quote of a JSON report
through a regex callback), measured in the same run as a ratio. CPU is the writer thread's
(``time.thread_time``), so it holds on a loaded machine; wall time is printed beside it.

    MINUTIAE_PG_DSN=postgresql://… .venv/bin/python bench/controller/pg_write.py [--takes 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet20k import fresh_dsn  # noqa: E402
from run import report  # noqa: E402

from minutiae.controller.store import open_store  # noqa: E402
from minutiae.controller.store.postgres import _SAVE, PgStore  # noqa: E402

#: the statement as it was before: every array parameter in text format
TEXT_SAVE = _SAVE.replace("%b", "?")


def take(store: PgStore, sql: str, rows: list[tuple[str, float, str, str, str]]
         ) -> tuple[float, float]:
    me = store.identity
    cols: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)]
    w0, c0 = time.perf_counter(), time.thread_time()
    store._one(sql, (me, *cols, me, [], [], False, me), retry=True)
    return time.perf_counter() - w0, time.thread_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--takes", type=int, default=60)
    a = ap.parse_args()
    dsn = os.environ.get("MINUTIAE_PG_DSN")
    if not dsn:
        sys.exit("pg_write: MINUTIAE_PG_DSN unset (scripts/services/postgres-up.sh)")
    store = open_store(fresh_dsn(dsn), identity="bench-write", pool=1)
    assert isinstance(store, PgStore)
    print(f"== one group commit of N full reports ({len(json.dumps(report(0)))} bytes each), "
          f"median of {a.takes}; load {os.getloadavg()[0]:.2f} ==")
    t = time.time()
    for n in (1, 26, 200):
        res: dict[str, tuple[float, float]] = {}
        for name, sql in (("text arrays (before)", TEXT_SAVE), ("binary arrays", _SAVE)):
            got = [take(store, sql, [(f"n{i:05d}", t + k + (0.5 if sql is _SAVE else 0),
                                      json.dumps(report(i)), "{}", f"d{k}")
                                     for i in range(n)]) for k in range(a.takes)]
            res[name] = (statistics.median(w for w, _ in got), statistics.median(c for _, c in got))
            print(f"{n:4d} reports, {name:<21} CPU {1e3 * res[name][1]:7.3f} ms "
                  f"({1e6 * res[name][1] / n:5.0f} us a report), wall {1e3 * res[name][0]:7.2f} ms")
        (bw, bc), (nw, nc) = res["text arrays (before)"], res["binary arrays"]
        print(f"{n:4d} reports: binary / text CPU {nc / bc:.2f}, wall {nw / bw:.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    store.close()


if __name__ == "__main__":
    main()

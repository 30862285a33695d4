"""slownodes on a `minutiae sim` dataset: chunked (the default) side by side with the whole table
processed at once (the way it ran before), each in a fresh process; wall s, CPU s and peak RSS,
medians of ``--repeats``. ``--as-limit GiB`` caps each process's address space (prlimit), so a
baseline that needs more aborts instead of swapping the shared box.

    .venv/bin/python bench/slownodes/run.py /tmp/sim1024 --repeats 3 --as-limit 6
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

CHILD = """
import json, sys
from minutiae.analyses.slownodes.analysis import analyse_telemetry
from minutiae.analyses.slownodes.read import read_dataset
from pathlib import Path
tel, fleet, jobs = read_dataset(Path(sys.argv[1]))
chunk = None if sys.argv[2] == "whole" else int(sys.argv[2])
r = analyse_telemetry(tel, fleet, jobs, None, sys.argv[1], chunk)
print(json.dumps(r.to_json(), sort_keys=True))
"""


def _limit(gib: float | None) -> None:
    if gib:
        n = int(gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (n, n))


def one(root: str, chunk: str, gib: float | None) -> dict[str, float | str]:
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", CHILD, root, chunk], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, preexec_fn=lambda: _limit(gib))
    out = p.stdout.read() if p.stdout else b""
    _, status, ru = os.wait4(p.pid, 0)
    return {"wall": time.perf_counter() - t0, "cpu": ru.ru_utime + ru.ru_stime,
            "rss_mib": ru.ru_maxrss / 1024, "ok": os.waitstatus_to_exitcode(status) == 0,
            "out": out.decode()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk-rows", default="250000")
    ap.add_argument("--as-limit", type=float, default=None, help="GiB of address space per process")
    a = ap.parse_args()
    res: dict[str, list[dict[str, float | str]]] = {"chunked": [], "whole": []}
    for _ in range(a.repeats):
        res["chunked"].append(one(a.root, a.chunk_rows, a.as_limit))
        res["whole"].append(one(a.root, "whole", a.as_limit))
    med: dict[str, dict[str, float]] = {}
    for name, runs in res.items():
        ok = [r for r in runs if r["ok"]]
        if not ok:
            peak = max(float(r["rss_mib"]) for r in runs)
            print(f"{name:8s} ABORTED in all {len(runs)} runs (limit {a.as_limit} GiB; peak RSS {peak:.0f} MiB)")
            continue
        med[name] = {k: statistics.median(float(r[k]) for r in ok) for k in ("wall", "cpu", "rss_mib")}
        m = med[name]
        print(f"{name:8s} wall {m['wall']:6.1f} s  CPU {m['cpu']:6.1f} s  peak RSS {m['rss_mib']:6.0f} MiB"
              f"  ({len(ok)}/{len(runs)} ok)")
    if len(med) == 2:
        c, w = med["chunked"], med["whole"]
        print(f"ratio chunked/whole: wall {c['wall'] / w['wall']:.2f}, CPU {c['cpu'] / w['cpu']:.2f}, "
              f"peak RSS {c['rss_mib'] / w['rss_mib']:.2f}")
        same = {json.dumps(json.loads(str(r["out"]))) for r in res["chunked"] + res["whole"] if r["ok"]}
        print("same report from both:", len(same) == 1)


if __name__ == "__main__":
    main()

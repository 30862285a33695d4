"""The straggler analysis of a simulated week, job by job, as ``minutiae eval --detector
stragglers`` runs it (``runs.analyse_runs`` on each job's timings): CPU and wall seconds, and
optionally every report's JSON, one line per job, to diff two copies of the source.

    .venv/bin/minutiae sim --nodes 1024 --days 7 --seed 1 --out /tmp/week --quiet
    .venv/bin/python bench/stragglers/week.py /tmp/week [--every 3] [--out reports.jsonl]

``MINUTIAE_SRC=DIR`` measures another copy of the source (e.g. /work/main/src) on the same
week; two copies whose ``--out`` files are byte-identical gave the same reports.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("MINUTIAE_SRC") or str(ROOT / "src"))

from minutiae.analyses.stragglers.analysis import Options  # noqa: E402
from minutiae.analyses.stragglers.runs import analyse_runs  # noqa: E402
from minutiae.sim.dataset import load_dataset, read_timings  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("week", type=Path)
    ap.add_argument("--every", type=int, default=1, help="analyse every N-th job")
    ap.add_argument("--out", type=Path, help="write each report's JSON here (one line per job)")
    args = ap.parse_args()
    ds = load_dataset(args.week)
    leaf_of = {r["node"]: r["leaf"] for r in ds.fleet}
    opts = Options(ranks_per_node=ds.gpus)
    lines: list[str] = []
    wall, cpu, jobs = time.perf_counter(), _cpu(), 0
    for job in ds.jobs[::args.every]:
        path = ds.timings_path(job.job_id)
        if not path.is_file():
            continue
        jobs += 1
        try:
            rep = analyse_runs(read_timings(path), str(path), leaf_of, opts)
        except Exception as exc:  # noqa: BLE001 - a failure is part of the output to compare
            lines.append(f"{path}: {type(exc).__name__}: {exc}")
            continue
        lines.append(json.dumps(rep.to_json(), sort_keys=True, default=str))
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    print(f"{jobs} jobs: {cpu:.2f} s CPU, {wall:.2f} s wall (load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()

"""Benchmark: ``minutiae topo --learn`` over 10,000 simulated node captures.

Captures are what ``minutiae topo --json`` prints on a DGX-H100-like node (~2 % of the nodes
carry a planted fault: a lost GPU, a 200G NIC, another driver or firmware, a gen4 GPU link, a
missing NIC). Three pipelines over the same files, each the median of several repeats:

* baseline   read + parse every capture into a NodeTopology (no learning at all);
* learn      the --learn pipeline: read, fingerprint (memoised on the capture's digest),
             majority per attribute, deviating nodes;
* learn-distinct  the same when every capture is different (a hostname fact in each), so the
             digest memo never hits: the worst case; single process and one process per CPU.

Wall and CPU seconds are both printed: on a shared machine the wall time also measures the
other tenants (the load average is printed too).

Run: .venv/bin/python bench/topo/run.py [--nodes N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from minutiae.analyses.topology.learn import fingerprint_files, learn
from minutiae.analyses.topology.parse.detect import parse_topology
from minutiae.analyses.topology.placement import report
from minutiae.analyses.topology.read_sysfs import iter_capture_files, read_capture_bytes
from minutiae.testing.topology import dgx_like_topology, with_facts

FAULTS = [dict(gpus=7), dict(slow_nic=2), dict(driver="550.54.15"), dict(firmware="28.39.1002"),
          dict(gpu_pcie=(4, 16)), dict(drop_nic=6)]


def make_fleet(root: Path, nodes: int, distinct: bool, seed: int = 7) -> int:
    rng = random.Random(seed)
    base = dgx_like_topology()
    same = json.dumps(report(base))
    planted = 0
    for i in range(nodes):
        knobs = rng.choice(FAULTS) if rng.random() < 0.02 else None
        planted += knobs is not None
        t = dgx_like_topology(**knobs) if knobs else base  # type: ignore[arg-type]
        if distinct:
            text = json.dumps(report(with_facts(t, hostname=f"gpu{i:05d}")))
        else:
            text = same if knobs is None else json.dumps(report(t))
        (root / f"gpu{i:05d}.json").write_text(text)
    return planted


def baseline(root: Path) -> int:
    n = 0
    for p in iter_capture_files(root):
        parse_topology(read_capture_bytes(p), str(p))
        n += 1
    return n


def learn_dir(root: Path, workers: int = 1) -> tuple[int, int]:
    items = [(p.stem, p) for p in iter_capture_files(root)]
    fps, _bad, parsed = fingerprint_files(items, read_capture_bytes, workers)
    res = learn(fps)
    return len(res.deviating_nodes()), parsed


def timed(fn, *args):  # type: ignore[no-untyped-def]
    """Wall seconds, CPU seconds (this process and its finished children) and the result."""
    import resource

    def cpu() -> float:
        a = resource.getrusage(resource.RUSAGE_SELF)
        b = resource.getrusage(resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

    c0, t0 = cpu(), time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, cpu() - c0, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        same, distinct = Path(tmp) / "same", Path(tmp) / "distinct"
        same.mkdir()
        distinct.mkdir()
        planted = make_fleet(same, args.nodes, distinct=False)
        make_fleet(distinct, args.nodes, distinct=True)
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        size = sum(p.stat().st_size for p in same.iterdir())
        print(f"{args.nodes} captures ({size / args.nodes / 1024:.1f} KiB each), "
              f"{planted} with a planted fault; median of {args.repeats} repeats")
        workers = min(4, os.cpu_count() or 1)
        rows = []
        for name, fn, d, extra in (
                ("baseline (parse only)", baseline, same, ()),
                ("learn", learn_dir, same, ()),
                ("baseline, distinct files", baseline, distinct, ()),
                ("learn, distinct files", learn_dir, distinct, ()),
                (f"learn, distinct, {workers} procs", learn_dir, distinct, (workers,))):
            runs = [timed(fn, d, *extra) for _ in range(args.repeats)]
            rows.append((name, statistics.median(r[0] for r in runs),
                         statistics.median(r[1] for r in runs), runs[0][2]))
        base_same, base_dist = rows[0][1], rows[2][1]
        print(f"load average before the runs: {load}")
        print(f"{'pipeline':30} {'wall s':>7} {'CPU s':>7} {'µs/capture':>11} "
              f"{'vs parse-only':>14}  result")
        for name, wall, cpu, out in rows:
            ref = base_dist if "distinct" in name else base_same
            print(f"{name:30} {wall:7.2f} {cpu:7.2f} {wall / args.nodes * 1e6:11.0f} "
                  f"{wall / ref:13.2f}x  {out}")
        best = min(rows[3][1], rows[4][1])
        print(f"learn over {args.nodes} captures: {rows[1][1]:.2f} s (fleet of identical nodes), "
              f"{best:.2f} s (every capture different); budget 10 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: ``minutiae topo --learn`` over 10,000 simulated node captures.

Captures are what ``minutiae topo --json`` prints on a DGX-H100-like node (~2 % of the nodes
carry a planted fault: a lost GPU, a 200G NIC, another driver or firmware, a gen4 GPU link, a
missing NIC). Three pipelines over the same files, each the median of several repeats:

* baseline   read + parse every capture into a NodeTopology (no learning at all);
* learn      the --learn pipeline: read, fingerprint (memoised on the capture's digest),
             majority per attribute, deviating nodes;
* learn-distinct  the same when every capture is different (a hostname fact in each), so the
             digest memo never hits: the worst case.

Run: .venv/bin/python bench/topo/run.py [--nodes N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from minutiae.analyses.topology import report
from minutiae.analyses.topology_learn import FingerprintCache, learn
from minutiae.parsers.topology import parse_topology
from minutiae.sources.topology_sysfs import iter_capture_files, read_capture_bytes
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


def learn_dir(root: Path) -> tuple[int, int]:
    cache = FingerprintCache()

    def fps():  # type: ignore[no-untyped-def]
        for p in iter_capture_files(root):
            fp = cache.fingerprint(read_capture_bytes(p), str(p))
            if not isinstance(fp, str):
                yield p.stem, fp

    res = learn(fps())
    return len(res.deviating_nodes()), cache.parsed


def timed(fn, *args):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


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
        size = sum(p.stat().st_size for p in same.iterdir())
        print(f"{args.nodes} captures ({size / args.nodes / 1024:.1f} KiB each), "
              f"{planted} with a planted fault; median of {args.repeats} repeats")
        rows = []
        for name, fn, d in (("baseline (parse only)", baseline, same),
                            ("learn", learn_dir, same),
                            ("baseline, distinct files", baseline, distinct),
                            ("learn, distinct files", learn_dir, distinct)):
            runs = [timed(fn, d) for _ in range(args.repeats)]
            med = statistics.median(r[0] for r in runs)
            rows.append((name, med, runs[0][1]))
        base_same, base_dist = rows[0][1], rows[2][1]
        print(f"{'pipeline':28} {'total s':>8} {'µs/capture':>11} {'vs parse-only':>14}  result")
        for name, med, out in rows:
            ref = base_dist if "distinct" in name else base_same
            print(f"{name:28} {med:8.2f} {med / args.nodes * 1e6:11.0f} {med / ref:13.2f}x  {out}")
        worst = rows[3][1]
        print(f"learn over {args.nodes} distinct captures: {worst:.2f} s "
              f"({'within' if worst <= 10 else 'OVER'} the 10 s budget)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

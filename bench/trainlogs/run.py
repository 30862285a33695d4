"""Reading a big Megatron-LM ``--timing-log-option all`` log: wall, CPU and peak memory of
``minutiae stragglers``' reader (``read_trainlog``: the file mapped, rank lines read from the
bytes by ``formats.fastrank``) against the readers before it, each in a fresh process, repeats
interleaved, medians, the machine's load while measuring:

- ``polars``: the same reader before the byte-level path (commit 00bb5c9, loaded from git);
- ``lines`` (``--lines``): the line-by-line ``parse_megatron`` before commit b65acfb.

Every reader's table is hashed (rows in order): the figures are only printed beside a check
that the tables are identical.

    .venv/bin/python bench/trainlogs/run.py [--mb 1024] [--ranks 512] [--repeats 3] [--lines]

The log is generated from Megatron's own format strings (``training.py`` iteration line,
``core/timers.py`` ``times across ranks (ms):`` block: 3 timers x ranks values per iteration).
Goal: 1 GB in <= 20 s and <= 2 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OLD = "b65acfb~1:src/minutiae/analyses/stragglers/parse_megatron.py"
POLARS = "00bb5c9"  # the polars-bound reader (every line a string) before formats.fastrank

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from pathlib import Path
path = Path(sys.argv[2])
t0, c0 = time.perf_counter(), time.process_time()
if sys.argv[1] == "lines":
    import old_megatron
    ranks = old_megatron.parse_megatron(path.read_bytes().decode()).ranks
else:   # what `minutiae stragglers train.log` does: the file mapped, not read
    from minutiae.analyses.stragglers.read import read_trainlog
    ranks = read_trainlog([path]).ranks
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the check below
import polars as pl
h = ranks.select(pl.col("step").cast(pl.Int64), pl.col("rank").cast(pl.Int64),
                 pl.col("seconds").cast(pl.Float32), pl.col("section").cast(pl.String)).hash_rows(1)
digest = int((h.to_numpy() * (pl.int_range(1, len(h) + 1, eager=True).cast(pl.UInt64).to_numpy()
                              )).sum(dtype="uint64"))
print(json.dumps({"s": dt, "cpu": cpu, "values": len(ranks), "digest": digest,
                  "rss_mb": rss, "mb": path.stat().st_size / 2**20}))
"""


def make_log(path: Path, mb: int, ranks: int) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    target = mb << 20
    with path.open("w") as f:
        it = 0
        while f.tell() < target:
            it += 1
            f.write(f" [2025-11-13 16:27:01] iteration {it:8d}/{500000:8d} | consumed samples: "
                    f"{it * 256:12d} | elapsed time per iteration (ms): 1350.2 | learning rate: "
                    f"3.000000E-04 | global batch size:   256 | lm loss: 7.500000E+00 |\n")
            f.write("times across ranks (ms):\n")
            for name, base in (("forward-backward", 1180.0), ("optimizer", 150.0),
                               ("batch-generator", 3.0)):
                vals = base * np.exp(rng.normal(0, 0.02, ranks))
                f.write(f"  {name}:\n")
                f.write("".join(f"     rank {r:2d}: {v:.2f}\n" for r, v in enumerate(vals)))


def run(which: str, log: Path, path: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, which, str(log), path], check=True,
                         capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": path})
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _tree(commit: str, into: Path) -> str:
    """``src`` of ``commit`` unpacked into ``into`` (the baseline reader, run as it was)."""
    tar = subprocess.run(["git", "archive", commit, "src"], cwd=ROOT, check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return str(into / "src")


NAMES = {"new": "read_trainlog (bytes by shape)", "polars": "previous reader (polars, 00bb5c9)",
         "lines": "line-by-line parse_megatron"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lines", action="store_true", help="also the line-by-line reader (slow)")
    ap.add_argument("--no-baseline", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "train.log"
        make_log(log, a.mb, a.ranks)
        (Path(d) / "old_megatron.py").write_text(subprocess.run(
            ["git", "show", OLD], cwd=ROOT, check=True, capture_output=True, text=True).stdout)
        paths = {"new": str(ROOT / "src")}
        if not a.no_baseline:
            paths["polars"] = _tree(POLARS, Path(d))
        if a.lines:
            paths["lines"] = d
        res: dict[str, list[dict[str, float]]] = {k: [] for k in paths}
        loads = []
        for _ in range(a.repeats):
            for k, path in paths.items():
                loads.append(os.getloadavg()[0])
                res[k].append(run(k, log, path))
    first = res["new"][0]
    print(f"Megatron 'all' log {first['mb']:.0f} MB, {a.ranks} ranks, {first['values']:,.0f} "
          f"timer values; {a.repeats} repeats, load {min(loads):.1f}-{max(loads):.1f} "
          f"(2 cores), medians")
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("s", "cpu", "rss_mb")}
           for k, v in res.items()}
    for k, m in med.items():
        same = {r["digest"] for r in res[k]} == {first["digest"]}
        print(f"  {NAMES[k]:36} wall {m['s']:6.1f} s  CPU {m['cpu']:6.1f} s  peak RSS "
              f"{m['rss_mb']:6.0f} MB  table {'identical' if same else 'DIFFERS'}")
    for k in med:
        if k != "new":
            print(f"  vs {NAMES[k]}: wall x{med[k]['s'] / med['new']['s']:.1f}, CPU "
                  f"x{med[k]['cpu'] / med['new']['cpu']:.1f}, memory "
                  f"x{med[k]['rss_mb'] / med['new']['rss_mb']:.1f} less")


if __name__ == "__main__":
    main()

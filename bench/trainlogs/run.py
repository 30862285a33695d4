"""Reading a big Megatron-LM ``--timing-log-option all`` log: time and peak memory of
``formats.parse_log`` against the line-by-line reader it replaced (``parse_megatron`` before
commit b65acfb, loaded from git), each in a fresh process, medians of repeats, machine load.

    .venv/bin/python bench/trainlogs/run.py [--mb 256] [--ranks 512] [--repeats 3]

The log is generated from Megatron's own format strings (``training.py`` iteration line,
``core/timers.py`` ``times across ranks (ms):`` block: 3 timers x ranks values per iteration).
The goal (1 GB in <= 20 s and <= 2 GB) is projected linearly from the size measured when 1 GB
does not fit this machine's time.
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

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from pathlib import Path
path = Path(sys.argv[2])
t0 = time.perf_counter()
if sys.argv[1] == "new":   # what `minutiae stragglers train.log` does: the file mapped, not read
    from minutiae.analyses.stragglers.read import read_trainlog
    n = read_trainlog([path]).ranks.height
else:
    import old_megatron
    n = old_megatron.parse_megatron(path.read_bytes().decode()).ranks.height
dt = time.perf_counter() - t0
print(json.dumps({"s": dt, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "values": n, "mb": path.stat().st_size / 2**20}))
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


def run(which: str, log: Path, libdir: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, which, str(log), libdir], check=True,
                         capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-baseline", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "train.log"
        make_log(log, a.mb, a.ranks)
        (Path(d) / "old_megatron.py").write_text(subprocess.run(
            ["git", "show", OLD], cwd=ROOT, check=True, capture_output=True, text=True).stdout)
        res: dict[str, list[dict[str, float]]] = {"new": [], "old": []}
        loads = []
        for _ in range(a.repeats):
            loads.append(os.getloadavg()[0])
            res["new"].append(run("new", log, d))
            if not a.no_baseline:
                res["old"].append(run("old", log, d))
    print(f"Megatron 'all' log {res['new'][0]['mb']:.0f} MB, {a.ranks} ranks, "
          f"{res['new'][0]['values']:,.0f} timer values; {a.repeats} repeats, load "
          f"{min(loads):.1f}-{max(loads):.1f}")
    med = {k: (statistics.median(r["s"] for r in v), statistics.median(r["rss_mb"] for r in v))
           for k, v in res.items() if v}
    scale = 1024 / res["new"][0]["mb"]
    for k, (s, m) in med.items():
        name = "read_trainlog (mmap, vectorised)" if k == "new" else "old line-by-line parse_megatron"
        print(f"  {name:34} {s:7.2f} s  peak RSS {m:7.0f} MB  (time x{scale:.1f} for 1 GB: "
              f"~{s * scale:5.1f} s)")
    if "old" in med:
        print(f"  speed-up {med['old'][0] / med['new'][0]:.1f}x, memory {med['old'][1] / med['new'][1]:.1f}x less")


if __name__ == "__main__":
    main()

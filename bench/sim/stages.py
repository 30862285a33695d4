"""CPU seconds per stage of `minutiae sim` + `minutiae eval` (the issue-3 goal), for a loaded
build machine: wall time there says little, CPU seconds (every process of the command's tree,
``bench/sim/run.py``'s ``run``) say what the code costs. Stages: sim, eval (its default
--jobs), and each named detector alone (``eval --detector NAME --jobs 1``). ``--base SRC``
runs the same commands with another source tree first on the path (e.g. a `git archive` of
main) in the same run, and prints the ratio. Medians of --repeats; the load average is printed
beside each figure.

    .venv/bin/python bench/sim/stages.py --nodes 256 --days 2 [--base /tmp/base/src]
        [--detectors stragglers slownodes] [--data DIR (reuse a dataset: no sim stage)]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import BIN, ROOT, Measure, run  # noqa: E402


def _measure(src: str, cmd: list[str], repeats: int) -> tuple[Measure, float]:
    os.environ["PYTHONPATH"] = src
    ms = [run(cmd, keep_stdout=True) for _ in range(repeats)]
    cpu = statistics.median(m.cpu for m in ms)
    best = min(ms, key=lambda m: abs(m.cpu - cpu))
    if best.rc != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {best.rc}")
    return best, os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--data", type=Path, default=None, help="an existing dataset (skip sim)")
    ap.add_argument("--base", default=None, help="another source tree to compare with")
    ap.add_argument("--this", default=str(ROOT / "src"), help="the source tree measured")
    ap.add_argument("--detectors", nargs="*", default=["stragglers", "slownodes"])
    ap.add_argument("--save", type=Path, default=None, help="write each eval's JSON here")
    a = ap.parse_args()
    trees = [("this", a.this)] + ([("base", a.base)] if a.base else [])
    with tempfile.TemporaryDirectory() as tmp:
        data = a.data or Path(tmp) / "ds"
        stages: list[tuple[str, list[str]]] = []
        if a.data is None:
            stages.append(("sim", [str(BIN), "sim", "--nodes", str(a.nodes), "--days", str(a.days),
                                   "--seed", str(a.seed), "--out", "{out}", "--quiet"]))
        stages.append(("eval", [str(BIN), "eval", str(data), "--json"]))
        stages += [(f"eval --detector {d}", [str(BIN), "eval", str(data), "--json", "--detector", d,
                                              "--jobs", "1"]) for d in a.detectors]
        print(f"{'stage':<30} {'tree':<5} {'CPU s':>8} {'wall s':>8} {'peak MiB':>9} {'load':>5}")
        for name, cmd in stages:
            got = {}
            for tag, src in trees:  # each tree's sim writes its own copy; eval reads "this" one
                out = str(data if tag == "this" else Path(tmp) / f"ds_{tag}")
                m, load = _measure(src, [c.replace("{out}", out) for c in cmd], a.repeats)
                got[tag] = m
                if a.save and name != "sim":
                    a.save.mkdir(parents=True, exist_ok=True)
                    (a.save / f"{name.replace(' ', '_').replace('-', '')}.{tag}.json").write_text(m.stdout)
                print(f"{name:<30} {tag:<5} {m.cpu:8.1f} {m.wall:8.1f} {m.peak_mib:9.0f} {load:5.1f}",
                      flush=True)
            if "base" in got and got["base"].cpu > 0:
                print(f"{name:<30} ratio this/base CPU {got['this'].cpu / got['base'].cpu:.2f}")


if __name__ == "__main__":
    main()

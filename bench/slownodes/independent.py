"""slownodes before/after on the independent fleet (minutiae.testing.telemetry_fleet), in one
process: the analysis as of a base commit (its whole package loaded from git into a temporary
package) side by side with the current one, per seed: faults found / observable, false alarms,
gaps reported, median wall time and CPU time, and the ratio; the machine load while measuring.

    .venv/bin/python bench/slownodes/independent.py --seeds 7 11 23 5 --repeats 3
    .venv/bin/python bench/slownodes/independent.py --physics real --faults random \
        --base 00bb5c9 --seeds 1000 1001 1002 1003 1004 1005 1006 1007 1008 1009

``--physics clean``: the model the analysis was first built against; ``real``: what a real
fleet adds (``telemetry_fleet.Physics``: workload power intensity with TDP capping, slot and
rack-position temperature, fan curve, utilisation dips, time-stamp jitter, lost scrapes, clock
faults as ceilings); ``real-nojitter``: the same on one time grid (what a Prometheus range
query returns). ``--faults random``: fault nodes, GPUs and windows drawn per seed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PKG = "src/minutiae/analyses/slownodes"


def _old(root: Path, base: str) -> Any:
    """The base revision's analysis from git, its imports pointed at the temporary package."""
    pkg = Path(tempfile.mkdtemp(prefix="slow_base_")) / f"slow_{base}"
    pkg.mkdir()
    names = subprocess.run(["git", "-C", str(root), "ls-tree", "--name-only", f"{base}:{PKG}"],
                           capture_output=True, text=True, check=True).stdout.split()
    for name in (n for n in names if n.endswith(".py")):
        text = subprocess.run(["git", "-C", str(root), "show", f"{base}:{PKG}/{name}"],
                              capture_output=True, text=True, check=True).stdout
        text = text.replace("minutiae.analyses.slownodes", pkg.name)
        (pkg / name).write_text(text)
    sys.path.insert(0, str(pkg.parent))
    return importlib.import_module(f"{pkg.name}.analysis").analyse_telemetry


def _fleet(seed: int, physics: str, faults: str) -> Any:
    from minutiae.testing import telemetry_fleet as tf

    names, skus, _ = tf._nodes(64)
    fl = tf.random_faults(seed, names, skus, 2 * 86400) if faults == "random" else None
    ph = {"clean": tf.CLEAN, "real": tf.Physics(), "real-nojitter": tf.Physics(jitter_s=0.0)}[physics]
    return tf.make_fleet(seed=seed, faults=fl, physics=ph)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[7, 11, 23, 5])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--base", default="586add7", help="the commit compared with (586add7: before issue 18)")
    ap.add_argument("--physics", choices=["clean", "real", "real-nojitter"], default="clean")
    ap.add_argument("--faults", choices=["default", "random"], default="default")
    a = ap.parse_args()
    from minutiae.analyses.slownodes.analysis import analyse_telemetry as new
    from minutiae.testing.fleet_score import observable, score

    old = _old(Path(__file__).resolve().parents[2], a.base)
    loads = [os.getloadavg()[0]]
    totals: dict[str, dict[str, float]] = {k: {"found": 0, "faults": 0, "fa": 0, "gaps": 0, "holes": 0}
                                           for k in ("before", "after")}
    walls: dict[str, list[float]] = {"before": [], "after": []}
    cpus: dict[str, list[float]] = {"before": [], "after": []}
    print(f"physics {a.physics}, faults {a.faults}, before = {a.base}")
    print(f"{'seed':>4}  {'':6}  {'found':>7}  {'false alarms':>12}  {'gaps reported':>13}  {'wall s':>6}  {'CPU s':>6}")
    for seed in a.seeds:
        f = _fleet(seed, a.physics, a.faults)
        obs = observable(f)
        for name, fn in (("before", old), ("after", new)):
            times, cpu, r = [], [], None
            for _ in range(a.repeats):
                t0, c0 = time.perf_counter(), time.process_time()
                r = fn(f.telemetry, f.fleet, f.jobs)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                loads.append(os.getloadavg()[0])
            assert r is not None
            # 586add7 had only the SM-clock signal: its findings count whatever their metric
            lenient = name == "before" and a.base.startswith("586add7")
            s = score(obs, list(r.findings), list(getattr(r, "unknown", ())), by_metric=not lenient)
            n, g = len(s.found) + len(s.missed), len(s.gaps_reported) + len(s.gaps_missed)
            t = totals[name]
            t["found"] += len(s.found)
            t["faults"] += n
            t["fa"] += len(s.false_alarms)
            t["gaps"] += len(s.gaps_reported)
            t["holes"] += g
            walls[name].append(statistics.median(times))
            cpus[name].append(statistics.median(cpu))
            miss = " missed: " + ", ".join(f"{x.kind} {x.node}/{x.gpu}" for x in s.missed) if s.missed else ""
            print(f"{seed:>4}  {name:6}  {len(s.found):>3}/{n:<3}  {len(s.false_alarms):>12}  "
                  f"{len(s.gaps_reported):>6}/{g:<6}  {statistics.median(times):>6.2f}  "
                  f"{statistics.median(cpu):>6.2f}{miss}")
    print("totals:")
    for name, t in totals.items():
        print(f"  {name:6}  found {t['found']:.0f}/{t['faults']:.0f}, false alarms {t['fa']:.0f}, "
              f"gaps/absent reported {t['gaps']:.0f}/{t['holes']:.0f}, median wall "
              f"{statistics.median(walls[name]):.2f} s, CPU {statistics.median(cpus[name]):.2f} s")
    print(f"ratio after/before median wall: "
          f"{statistics.median(walls['after']) / statistics.median(walls['before']):.2f}, CPU: "
          f"{statistics.median(cpus['after']) / statistics.median(cpus['before']):.2f}")
    print(f"load average (1 min) while measuring: median {statistics.median(loads):.2f}, "
          f"max {max(loads):.2f}")
    print("(a finding counts when its metric is the one that should find the fault; for the "
          "586add7 base, on node/GPU/time alone)")


if __name__ == "__main__":
    main()

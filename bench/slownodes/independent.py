"""slownodes before/after on the independent fleet (minutiae.testing.telemetry_fleet), in one
process: the analysis as of commit 586add7 (loaded from git into a temporary package) side by
side with the current one, per seed: faults found / observable, false alarms, gaps reported,
median wall time, and the ratio; the machine load while measuring.

    .venv/bin/python bench/slownodes/independent.py --seeds 7 11 23 5 --repeats 3
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

BASE = "586add7"  # before issue 18: SM clock / IB / PCIe only, one episode per GPU, no gaps


def _old(root: Path) -> Any:
    """The baseline analysis from git, its imports pointed at the temporary package."""
    pkg = Path(tempfile.mkdtemp(prefix="slow_base_")) / "slow_base"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in ("analysis", "chunked"):
        text = subprocess.run(["git", "-C", str(root), "show",
                               f"{BASE}:src/minutiae/analyses/slownodes/{name}.py"],
                              capture_output=True, text=True, check=True).stdout
        text = (text.replace("minutiae.analyses.slownodes.chunked", "slow_base.chunked")
                .replace("from minutiae.analyses.slownodes import analysis as sn",
                         "from slow_base import analysis as sn"))
        (pkg / f"{name}.py").write_text(text)
    sys.path.insert(0, str(pkg.parent))
    return importlib.import_module("slow_base.analysis").analyse_telemetry


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[7, 11, 23, 5])
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    from minutiae.analyses.slownodes.analysis import analyse_telemetry as new
    from minutiae.testing.telemetry_fleet import make_fleet, observable, score

    old = _old(Path(__file__).resolve().parents[2])
    loads = [os.getloadavg()[0]]
    totals: dict[str, dict[str, float]] = {k: {"found": 0, "faults": 0, "fa": 0, "gaps": 0, "holes": 0}
                                           for k in ("before", "after")}
    walls: dict[str, list[float]] = {"before": [], "after": []}
    print(f"{'seed':>4}  {'':6}  {'found':>7}  {'false alarms':>12}  {'gaps reported':>13}  {'wall s':>6}")
    for seed in a.seeds:
        f = make_fleet(seed=seed)
        obs = observable(f)
        for name, fn in (("before", old), ("after", new)):
            times, r = [], None
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                r = fn(f.telemetry, f.fleet, f.jobs)
                times.append(time.perf_counter() - t0)
                loads.append(os.getloadavg()[0])
            assert r is not None
            s = score(obs, list(r.findings), list(getattr(r, "unknown", ())), by_metric=name == "after")
            n, g = len(s.found) + len(s.missed), len(s.gaps_reported) + len(s.gaps_missed)
            t = totals[name]
            t["found"] += len(s.found)
            t["faults"] += n
            t["fa"] += len(s.false_alarms)
            t["gaps"] += len(s.gaps_reported)
            t["holes"] += g
            walls[name].append(statistics.median(times))
            print(f"{seed:>4}  {name:6}  {len(s.found):>3}/{n:<3}  {len(s.false_alarms):>12}  "
                  f"{len(s.gaps_reported):>6}/{g:<6}  {statistics.median(times):>6.2f}")
    print("totals:")
    for name, t in totals.items():
        print(f"  {name:6}  found {t['found']:.0f}/{t['faults']:.0f}, false alarms {t['fa']:.0f}, "
              f"gaps/absent reported {t['gaps']:.0f}/{t['holes']:.0f}, median wall "
              f"{statistics.median(walls[name]):.2f} s")
    print(f"ratio after/before median wall: "
          f"{statistics.median(walls['after']) / statistics.median(walls['before']):.2f}")
    print(f"load average (1 min) while measuring: median {statistics.median(loads):.2f}, "
          f"max {max(loads):.2f}")
    print("(before: a finding counts on node/GPU/time alone, whatever its metric; after: only the "
          "metric that should find the fault)")


if __name__ == "__main__":
    main()

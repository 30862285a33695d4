"""Calibrates the detector's thresholds (src/minutiae/analyses/regress/regress.toml) for a target
false-alarm rate on pure-noise series (Gaussian + 3 % one-sided outlier runs of +5..30 %).

    .venv/bin/python bench/regress/calibrate.py [REPS]            # change-point penalty
    .venv/bin/python bench/regress/calibrate.py --online [REPS]   # online CUSUM threshold h

Penalty: share of series in which the search reports any change point. Online: share of series in
which the CUSUM raises any alarm while the series grows (every alarm a monitor would have shown),
and the mean runs between false alarms. Noise level does not matter (both standardise by the
series' robust sigma)."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from minutiae.analyses.regress.detect import confirmed_cuts, load_params
from minutiae.analyses.regress.online import online_alarms
from minutiae.testing.synth.regress import synth_series

LENGTHS = (20, 50, 100, 200, 400)


def penalty(reps: int) -> None:
    base = load_params()
    rng = np.random.default_rng(7)
    print(f"false-alarm share of pure-noise series ({reps} series each); shipped penalty {base.penalty}")
    print("penalty " + " ".join(f"n={n:<5}" for n in LENGTHS))
    for pen in (2.0, 2.5, 3.0, 3.5, 4.0):
        p = dataclasses.replace(base, penalty=pen)
        row = []
        for n in LENGTHS:
            y, _ = synth_series(rng, reps, n, 0.02)
            row.append(np.mean([bool(confirmed_cuts(y[i], p)) for i in range(reps)]))
        print(f"{pen:7.1f} " + " ".join(f"{r:7.3f}" for r in row))


def online(reps: int) -> None:
    base = load_params().online
    rng = np.random.default_rng(7)
    lengths = (50, 120, 400)
    print(f"online CUSUM: false-alarm share of pure-noise series ({reps} series each, 1 % noise); "
          f"shipped h {base.h}, k {base.k}; runs per false alarm = monitored runs / alarms")
    print("    h " + " ".join(f"n={n:<5}" for n in lengths) + "  runs/false alarm")
    ys = {n: synth_series(rng, reps, n, 0.01)[0] for n in lengths}
    for h in (2.5, 2.75, 3.0, 3.25, 3.5, 4.0):
        p = dataclasses.replace(base, h=h)
        row, alarms, runs = [], 0, 0
        for n in lengths:
            found = [online_alarms(ys[n][i], p) for i in range(reps)]
            row.append(np.mean([bool(f) for f in found]))
            alarms += sum(len(f) for f in found)
            runs += reps * max(n - p.warmup, 0)
        print(f"{h:5.2f} " + " ".join(f"{r:7.3f}" for r in row) + f"  {runs / max(alarms, 1):10.0f}")


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--online"]
    reps = int(args[0]) if args else 300
    (online if "--online" in sys.argv else penalty)(reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())

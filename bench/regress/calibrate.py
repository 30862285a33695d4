"""Calibrates the detector penalty (src/minutiae/analyses/regress.toml) for a target false-alarm
rate: share of pure-noise series (Gaussian + 3 % one-sided outlier runs) in which the detector
reports any change point, for a grid of penalties and series lengths. Noise level does not matter
(the detector standardises by the series' robust sigma)."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from minutiae.analyses.regress import detect_series, load_params
from minutiae.analyses.regress_synth import synth_series


def main() -> int:
    base = load_params()
    rng = np.random.default_rng(7)
    lengths = (20, 50, 100, 200, 400)
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    print(f"false-alarm share of pure-noise series ({reps} series each); shipped penalty {base.penalty}")
    print("penalty " + " ".join(f"n={n:<5}" for n in lengths))
    for pen in (2.0, 2.5, 3.0, 3.5, 4.0):
        p = dataclasses.replace(base, penalty=pen)
        row = []
        for n in lengths:
            y, _ = synth_series(rng, reps, n, 0.02)
            row.append(np.mean([bool(detect_series(y[i], p)) for i in range(reps)]))
        print(f"{pen:7.1f} " + " ".join(f"{r:7.3f}" for r in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Power analysis: how fast can a shift be reported at a given run-to-run noise, by anyone?

    .venv/bin/python bench/regress/power.py [--series 200]

Two rows per noise level (0.5, 1, 2, 3 %), on series whose shift comes after 40 runs:

  oracle  the best case for any detector with the same false-alarm budget: Gaussian noise, the
          level before the change and the noise KNOWN, no outlier runs, a one-sided CUSUM tuned to
          the very shift (k = shift/2, Page's test is optimal for a known shift), threshold set so
          that 5 % of 120-run pure-noise series raise a false alarm. Scale-free: only shift/noise
          matters.
  ours    the shipped detector (change-point search + online CUSUM, regress.toml) on the
          benchmark's series: noise and level estimated from the runs, 3 % outlier runs.

"reported within 5 runs": on the history ending 5 runs after the change, an alert (a confirmed or
young cut, or any alarm the CUSUM raised) lies within 5 runs of it with the right sign. The
minimum shift is the smallest one reported within 5 runs in >= 95 % of series (oracle: solved on
a fine grid; ours: the grid 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 12 %).
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from minutiae.analyses.regress.detect import detect_series, load_params
from minutiae.analyses.regress.online import online_alarms
from minutiae.testing.synth.regress import synth_series

NOISES = (0.005, 0.01, 0.02, 0.03)
SHIFTS = (0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.08, 0.10, 0.12)
PRE, HORIZON, BUDGET = 40, 120, 0.05


def _cusum_max(z: np.ndarray, k: float) -> np.ndarray:
    """Running one-sided CUSUM statistic of each row."""
    g = np.zeros(z.shape[0])
    out = np.empty_like(z)
    for t in range(z.shape[1]):
        g = np.maximum(0.0, g + z[:, t] - k)
        out[:, t] = g
    return out


def oracle_within5(ratio: float, rng: np.random.Generator, n: int) -> float:
    """P(a CUSUM reports a shift of ``ratio`` sigma within 5 runs | no alarm before), threshold at
    the 5 % false-alarm budget over 120 runs (known level and noise), best drift k of a grid."""
    return max(_oracle(ratio, k, rng, n) for k in {ratio / 2.0, 0.5, 0.75, 1.0, 1.5})


def _oracle(ratio: float, k: float, rng: np.random.Generator, n: int) -> float:
    h = float(np.quantile(_cusum_max(rng.normal(size=(n, HORIZON)), k).max(axis=1), 1.0 - BUDGET))
    z = rng.normal(size=(n, PRE + 5))
    z[:, PRE:] += ratio
    g = _cusum_max(z, k)
    quiet = (g[:, :PRE] <= h).all(axis=1)
    return float((g[quiet, PRE:] > h).any(axis=1).mean())


def ours_within5(noise: float, shift: float, rng: np.random.Generator, n: int) -> float:
    p = load_params()
    y, truth = synth_series(rng, n, PRE + 10, noise, sizes=(shift,), min_before=PRE, min_gap=10)
    hit = 0
    for t in truth:
        yy = y[t.series, : t.index + 5]
        alerts = [(c.index, c.change) for c in detect_series(yy, p)]
        alerts += [(a.index, a.change) for a in online_alarms(yy, p.online)]
        hit += any(abs(i - t.index) <= 5 and c > 0 for i, c in alerts)
    return hit / n


def ours_false_alarms(noise: float, rng: np.random.Generator, n: int) -> float:
    p = load_params()
    y, _ = synth_series(rng, n, HORIZON, noise)
    return float(np.mean([bool(detect_series(y[i], p)) or bool(online_alarms(y[i], p.online))
                          for i in range(n)]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=200)
    a = ap.parse_args()
    rng = np.random.default_rng(17)
    grid = np.arange(1.0, 4.01, 0.125)
    curve = [oracle_within5(float(r), rng, 20 * a.series) for r in grid]
    r95 = next((float(r) for r, p in zip(grid, curve, strict=True) if p >= 0.95), float("nan"))
    print(f"oracle: reported within 5 runs >= 95 % needs shift >= {r95:.2f} x noise "
          f"(5 % of {HORIZON}-run series with a false alarm)")
    print(f"{'noise':>6} {'detector':>8} {'2% within 5':>12} {'min shift within 5 (95 %)':>26} "
          f"{'pure-noise series with an alarm':>32}")
    for noise in NOISES:
        ratio = math.log1p(0.02) / math.log1p(noise)
        p2 = oracle_within5(ratio, rng, 20 * a.series)
        print(f"{noise:6.1%} {'oracle':>8} {p2:12.0%} {math.expm1(r95 * math.log1p(noise)):26.1%} {BUDGET:32.0%}")
        found = {s: ours_within5(noise, s, rng, a.series) for s in SHIFTS}
        smallest = next((s for s in SHIFTS if found[s] >= 0.95), None)
        print(f"{'':6} {'ours':>8} {found[0.02]:12.0%} "
              f"{(f'{smallest:.1%}' if smallest else '> 12 %'):>26} "
              f"{ours_false_alarms(noise, rng, a.series):32.1%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How Student-t noise moves the CUSUMs' false-alarm rate away from the Gaussian design.

    .venv/bin/python bench/stragglers/tails.py [--draws 2000000]

The tests' thresholds (``calib.design``) assume Gaussian increments plus one-step spikes. For a
one-sided CUSUM with reference ``k`` and threshold ``h`` the in-control run length grows as
``exp(theta h)``, ``theta`` the adjustment coefficient, the root of ``E exp(theta (z - k)) = 1``
(``2 k`` for Gaussian increments). Here ``z`` is the noise divided by ``calib.noise_sigma`` of
the same draws (what the warm-up estimates) and clipped as each test clips (the slow test at 3,
the fast one at ``k + h / 4``, four steps at its clip), and the rate is compared with the
Gaussian design's as ``exp((2 k - theta) h)``: a first-order figure, not a simulation of the
run length (which at the design's 1e-8 per rank-step is out of reach).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("MINUTIAE_SRC") or str(ROOT / "src"))

from minutiae.analyses.stragglers.calib import FAST_K, SLOW_CLIP, SLOW_K, noise_sigma  # noqa: E402

#: the thresholds of a week job's design (job 100238 of the simulator's seed 3: fast h 5.84,
#: slow h 17.66 at 0.1 false alarms per 1,000 node-days)
H = {"fast": 5.84, "slow": 17.66}


def theta(z: np.ndarray, k: float) -> float:
    """The positive root of ``mean(exp(t (z - k))) = 1`` (bisection)."""
    lo, hi = 1e-4, 8.0
    for _ in range(80):
        mid = (lo + hi) / 2.0
        if np.mean(np.exp(mid * (z - k))) > 1.0:
            hi = mid
        else:
            lo = mid
    return lo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=2_000_000)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{a.draws:,} draws; z = noise / calib.noise_sigma, clipped as each test clips")
    print(f"{'noise':<12} {'test':<5} {'k':>4} {'h':>6} {'clip':>5} {'sd(z)':>6} {'theta':>6} "
          f"{'2k':>5} {'rate / design':>13}")
    for label, df in (("gaussian", 0), ("student-t 5", 5), ("student-t 4", 4), ("student-t 3", 3)):
        e = rng.standard_normal(a.draws) if df == 0 else rng.standard_t(df, a.draws)
        s, _ = noise_sigma(e[:200_000])
        for test, k in (("fast", FAST_K), ("slow", SLOW_K)):
            h = H[test]
            clip = SLOW_CLIP if test == "slow" else k + h / 4.0
            z = np.clip(e / s, -clip, clip)
            t = theta(z, k)
            print(f"{label:<12} {test:<5} {k:>4} {h:>6} {clip:>5.2f} {z.std():>6.3f} {t:>6.3f} "
                  f"{2 * k:>5.1f} {np.exp((2 * k - t) * h):>13.3g}")


if __name__ == "__main__":
    main()

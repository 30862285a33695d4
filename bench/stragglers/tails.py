"""What Student-t noise does to the CUSUMs' false-alarm rate, with and without the tail raise.

    .venv/bin/python bench/stragglers/tails.py [--draws 200000]

The tests' base thresholds (``calib.design``) assume Gaussian increments plus one-step spikes;
``calib.tail_threshold`` raises them when the standardised innovations of the warm-up have
heavier tails (what ``whiten`` applies to every series). For a one-sided CUSUM with reference
``k``, clip ``c`` and threshold ``h`` on increments ``clip(z) - k`` of mean ``-mu`` the
in-control run length is ``(exp(theta b) - theta b - 1) / (theta mu)``, ``b = h + 1.166``,
``theta`` the root of ``E exp(theta (clip(z) - k)) = 1`` (Siegmund's formula is the Gaussian
case). Here ``z`` is the noise over ``calib.noise_sigma`` of the same draws, values beyond
``SPIKE_Z`` left to the spike model as the shipped code does, and the rate (1 / run length) is
printed as a multiple of the design's, at the base threshold, at the one raised on all the
draws, and (mean over ``REPEATS``) at those raised on warm-up-sized samples: first-order
figures, not a simulation of run lengths of ~1e8 steps.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("MINUTIAE_SRC") or str(ROOT / "src"))

from minutiae.analyses.stragglers.calib import (  # noqa: E402
    SPIKE_Z,
    _root,
    design,
    histogram,
    noise_sigma,
    tail_threshold,
)

#: a warm-up's standardised innovations (128 ranks x 20 steps) and how many such samples
WARM, REPEATS = 2_560, 40


def rate(z: np.ndarray, k: float, clip: float, h: float) -> float:
    """1 / run length of the CUSUM (k, clip, h) on increments ``clip(z) - k``."""
    counts, centres = histogram(np.clip(z, -clip, clip), -clip, clip, 4096)
    seen = counts > 0
    p, x = counts[seen] / z.size, (centres - k)[seen]
    mu, theta = -float(np.dot(p, x)), _root(p, x)
    b = theta * (h + 1.166)
    return float(theta * mu / (np.expm1(b) - b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=200_000)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    # a week job's design: 4.6 s steps, one logged in 40, 8 GPUs a node, 0.1 per 1,000
    # node-days, step and compute bases, spikes on 0.3 % of the warm-up
    base = design(0.1, 4.6, 8, bases=2, spikes=(15, 5000), every=40)
    print(f"{a.draws:,} draws; z = noise / calib.noise_sigma; |z| > {SPIKE_Z} left to the spike model")
    print(f"{'noise':<12} {'test':<5} {'k':>4} {'clip':>5} {'h base':>7} {'h raised':>8} "
          f"{'rate/design base':>16} {'raised':>8} {f'raised on {WARM:,}':>16}")
    for label, df in (("gaussian", 0), ("student-t 5", 5), ("student-t 4", 4), ("student-t 3", 3)):
        e = rng.standard_normal(a.draws) if df == 0 else rng.standard_t(df, a.draws)
        z = e / noise_sigma(e)[0]
        body = z[np.abs(z) <= SPIKE_Z]
        for d in base.detectors:
            h = tail_threshold(d, z)
            want = 1.0 / (2.0 / d.alpha)
            # thresholds raised from warm-up-sized samples, each judged on the whole body
            small = [rate(body, d.k, d.clip, tail_threshold(d, z[rng.integers(0, z.size, WARM)]))
                     for _ in range(REPEATS)]
            print(f"{label:<12} {d.name:<5} {d.k:>4} {d.clip:>5.2f} {d.h:>7.2f} {h:>8.2f} "
                  f"{rate(body, d.k, d.clip, d.h) / want:>16.3g} "
                  f"{rate(body, d.k, d.clip, h) / want:>8.3g} "
                  f"{float(np.mean(small)) / want:>16.3g}")


if __name__ == "__main__":
    main()

"""The detection bound under the hard mixture's wander (issue 13): what a test that knows the
true AR(1) + white model (phi 0.95, AR sd 0.8 %, white sd 1.28 % = TP-shared 1 % + per-rank
0.8 %) and the onset finds, Gaussian noise, with the matched filter of the shift's innovation
signature (``shift.py``) from the onset; alarm when T > c. c at the shift test's share per step
with one look per step (known onset: optimistic, no test can have it), with Bonferroni over 100
onsets (shipped before 2026-12-03 late) and with the up-crossing bound (``shift.upcross``,
shipped now: the lowest c this budget allows with an unknown onset that we can prove).

    .venv/bin/python bench/stragglers/oracle.py [--phi 0.95 --ar 0.008 --white 0.0128]
        [--false-alarms 0.1]      (~1 CPU minute)

Defaults: the hard mixture. The issue's own wander (AR(1) phi 0.9-0.97 at 1 %, with the
generator's default white 1.2 %): ``--ar 0.01 --white 0.012 --phi 0.9`` etc.
"""
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
import argparse  # noqa: E402

from minutiae.analyses.stragglers.armodel import ArModel  # noqa: E402
from minutiae.analyses.stragglers.calib import design  # noqa: E402
from minutiae.analyses.stragglers.shift import threshold  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--phi", type=float, default=0.95)
ap.add_argument("--ar", type=float, default=0.008)
ap.add_argument("--white", type=float, default=float(np.hypot(0.01, 0.008)))
ap.add_argument("--false-alarms", type=float, default=0.1)
cli = ap.parse_args()
phi, ar, wh = cli.phi, cli.ar, cli.white
print(f"AR(1) phi {phi:g} sd {ar:.2%}, white sd {wh:.2%}, {cli.false_alarms:g} false alarms per 1,000 node-days")
tot = ar**2 + wh**2
m = ArModel(phi, ar**2 / tot, wh**2 / tot)
K, p = m.gain(), m.passes()
rho = phi * (1 - K)
d = design(cli.false_alarms, 1.0, 8, 2)
alpha = d.detectors[1].alpha / 2
for name, c in (("known onset, one look per step", -NormalDist().inv_cdf(alpha / 2)),
                ("Bonferroni over 100 onsets (before)", -NormalDist().inv_cdf(alpha / 200)),
                ("up-crossing bound (shipped)", threshold(alpha, m))):
    rng = np.random.default_rng(0)
    for size, goal in ((0.10, 5), (0.05, 20), (0.03, 50)):
        n_trials, steps = 4000, 200
        shift = np.log1p(size)
        a = rng.normal(0, ar, n_trials)
        level = np.zeros(n_trials)
        # burn in the filter
        s = g2 = np.zeros(n_trials)
        geo = 1.0
        found = np.full(n_trials, np.inf)
        innov_sd = None
        nus = []
        for t in range(-300, steps):
            a = phi * a + rng.normal(0, ar * np.sqrt(1 - phi**2), n_trials)
            r = a + rng.normal(0, wh, n_trials) + (shift if t >= 0 else 0.0)
            level = phi * level
            nu = r - level
            level = level + K * nu
            if t < 0:
                nus.append(nu)
                continue
            if innov_sd is None:
                innov_sd = np.std(np.concatenate(nus))
            g = p + (1 - p) * geo
            geo *= rho
            s = s + g * np.clip(nu / innov_sd, -3.5, 3.5)
            g2 = g2 + g * g
            stat = s / np.sqrt(g2)
            found = np.where((stat > c) & ~np.isfinite(found), t + 1, found)
        print(f"{name} (c {c:.2f}; passes {p:.3f}, rho {rho:.3f}) +{size:.0%}: within {goal}: "
              f"{np.mean(found <= goal):.1%}, p50 delay {np.median(found):.0f}")

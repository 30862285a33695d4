"""Does the unknown onset cost the shift test anything? On the faults of ``worlds.faulty`` (the
hard mixture: TP-shared, AR(1) 0.95 wander, lottery, t(4) tails), the innovations the shift test
(``shift.ShiftTest``) sees for the faulty rank are recorded, and its matched filter is run on
them from the **true** onset with the detector's own fitted signature and threshold. Printed per
seed: the detector's delay, that known-onset delay, and the statistic 20 steps after the onset.

    .venv/bin/python bench/stragglers/onset_oracle.py [--seeds 20] [--fault gpu+5%]
        [--false-alarms 0.1]

(~1 CPU minute.) The detector's own path is unchanged: the recording wraps ``ShiftTest.run``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parents[1] / "src"))
sys.path.insert(0, str(ROOT))

import structures  # noqa: E402
import worlds  # noqa: E402

import minutiae.analyses.stragglers.shift as shift  # noqa: E402
from minutiae.analyses.stragglers.analysis import Options  # noqa: E402
from minutiae.analyses.stragglers.runs import analyse_runs  # noqa: E402

AT = 20


def record(w: worlds.World, options: Options) -> tuple[list[int], np.ndarray, np.ndarray, tuple[float, float], float]:
    """Analyse ``w``; the detector's delays for the faulty rank, and what its shift test saw
    for that rank: steps, innovations, the last signature (p, rho) and threshold."""
    target, onset = w.faults[0].target, structures.onset_step(w)
    seen: list[tuple[np.ndarray, np.ndarray, tuple[float, float], float]] = []
    run = shift.ShiftTest.run

    def recording(self: shift.ShiftTest, z: np.ndarray, *a: object) -> object:
        if z.shape[1] == w.ranks:
            seen.append((a[2].copy(), z[:, target].copy(), shift.signature(a[3]), self.c))  # type: ignore[union-attr,arg-type]
        return run(self, z, *a)  # type: ignore[arg-type]

    shift.ShiftTest.run = recording  # type: ignore[method-assign]
    try:
        rep = analyse_runs(worlds.table(w), w.name, None, options)
    finally:
        shift.ShiftTest.run = run  # type: ignore[method-assign]
    delays = [s.detected_step - onset + 1 for s in rep.suspects if structures.truth_match(w, s.to_json())]
    steps = np.concatenate([s[0] for s in seen])
    z = np.concatenate([s[1] for s in seen])
    return delays, steps, z, seen[-1][2], seen[-1][3]


def known_onset(z: np.ndarray, p: float, rho: float, c: float) -> tuple[int | None, float]:
    """The matched filter from the first value of ``z``: its first delay over ``c`` and its
    value after ``AT`` steps."""
    x = np.clip(z, -shift.CLIP, shift.CLIP)
    g = p + (1.0 - p) * rho ** np.arange(x.size)
    t = np.cumsum(g * x) / np.sqrt(np.cumsum(g * g))
    over = np.flatnonzero(t > c)
    return (int(over[0]) + 1 if over.size else None), float(t[AT - 1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--fault", default="gpu+5%")
    ap.add_argument("--false-alarms", type=float, default=Options().false_alarms)
    a = ap.parse_args()
    options = Options(false_alarms=a.false_alarms)
    print(f"{a.fault} under the hard mixture, --false-alarms {a.false_alarms:g}, seeds 0-{a.seeds - 1}")
    print(f"{'seed':>4} {'detector':>8} {'known onset':>11} {'T at ' + str(AT):>8} {'c':>5}")
    within = [0, 0]
    values = []
    for seed in range(a.seeds):
        w = next(x for x in worlds.faulty(seed) if x.name == a.fault)
        delays, steps, z, (p, rho), c = record(w, options)
        i = int(np.searchsorted(steps, structures.onset_step(w)))
        k, t_at = known_onset(z[i:], p, rho, c)
        d = min(delays) if delays else None
        within[0] += d is not None and d <= AT
        within[1] += k is not None and k <= AT
        values.append(t_at)
        print(f"{seed:>4} {str(d):>8} {str(k):>11} {t_at:>8.2f} {c:>5.2f}")
    print(f"within {AT}: detector {within[0]}/{a.seeds}, known onset {within[1]}/{a.seeds}; "
          f"T at {AT}: mean {statistics.mean(values):.2f}, sd {statistics.pstdev(values):.2f}")


if __name__ == "__main__":
    main()

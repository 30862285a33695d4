"""What the whole job's series show, and what the per-rank data cannot show.

- **Wait-included totals.** Per-rank wall-clock step totals of a synchronous job include the
  wait for the slowest rank at the collective, so every rank logs the same time: a straggler
  makes all of them slower and none stands out. Recognised when, over the warm-up, ranks' log
  step times agree within ``WAIT_SPREAD`` (median across steps of the robust spread across
  ranks) while the job's step time moves at least ``WAIT_RATIO`` times more from step to step.
  The report says so (``data_limits``) and the job-level series is still analysed.
- **Job-level changes** of the typical step time, compute time and own collective time
  (per-step medians over ranks), found by ``joblevel.change_points`` (binary segmentation
  against the series' own noise). A slow link in a ring all-reduce makes every rank's
  collective slower, so the peer comparison sees nothing: here it is a job-level
  communication slowdown with its onset and size.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from minutiae.analyses.stragglers.joblevel import change_points
from minutiae.analyses.stragglers.medians import fast_median
from minutiae.analyses.stragglers.types import JobChange

WAIT_SPREAD = 0.001
WAIT_RATIO = 5.0
#: smallest lasting job-level change reported (the straggler floor's default)
MIN_CHANGE = 0.03
MIN_STEPS = 24


def wait_included(total: np.ndarray) -> tuple[float, float] | None:
    """(spread across ranks, step-to-step job variation) of log step totals when the totals
    look wait-included, else None. ``total`` is (steps, ranks) seconds."""
    if total.shape[0] < 4 or total.shape[1] < 2:
        return None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        lx = np.log(total)
        med = np.nanmedian(lx, axis=1, keepdims=True)
        across = float(np.nanmedian(1.4826 * np.nanmedian(np.abs(lx - med), axis=1)))
        d = np.diff(med[:, 0])
        job = float(1.4826 * np.nanmedian(np.abs(d - np.nanmedian(d))) / math.sqrt(2.0))
    if math.isfinite(across) and across < WAIT_SPREAD and job >= WAIT_RATIO * max(across, 1e-5):
        return across, job
    return None


class JobSeries:
    """Per-step typical times of the whole job, kept as steps are tested."""

    def __init__(self) -> None:
        self.steps: list[np.ndarray] = []
        self.values: dict[str, list[np.ndarray]] = {}

    def add(self, steps: np.ndarray, name: str, x: np.ndarray) -> None:
        """``x`` (steps, ranks) seconds: its per-step median (a strided sample of ranks)."""
        stride = max(1, x.shape[1] // 4096)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.log(fast_median(x[:, ::stride], axis=1))
        self.values.setdefault(name, []).append(med)
        if name == "step":
            self.steps.append(steps)

    def changes(self, min_change: float = MIN_CHANGE) -> tuple[JobChange, ...]:
        if not self.steps:
            return ()
        steps = np.concatenate(self.steps)
        out = []
        for name, parts in self.values.items():
            y = np.concatenate(parts)
            ok = np.isfinite(y)
            if ok.sum() < MIN_STEPS or y.size != steps.size:
                continue
            y, st = y[ok], steps[ok]
            d = np.diff(y)
            sigma = float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))
            cuts = change_points(y, sigma, min_change)
            bounds = [0, *cuts, y.size]
            levels = [float(np.median(y[a:b])) for a, b in zip(bounds, bounds[1:], strict=False)]
            for i, c in enumerate(cuts):
                change = math.expm1(levels[i + 1] - levels[i])
                if change > 0:  # slower: what costs the job (a speed-up is not a finding)
                    out.append(JobChange(name, int(st[c]), change, i == len(cuts) - 1))
        return tuple(out)

"""The slowdown a test's excursion held when it alarmed: its mean less its largest step.

A fault that comes and goes (a 30 % fail-slow for twenty minutes of a long job) averages out
below the floor after it ends, so the floor also counts a suspect's size when found
(``floor.size``). That size is the mean log-ratio of the excursion that alarmed, over a few
steps: one GC pause, loader stall or Student-t tail among them (every job has them) lifts it
by its own size over the count (measured on the simulator's week: a +27.9 % one-step spike and a
+8.5 % step made a "+20.7 % when found" on a GPU whose lottery is +3.1 %, job 100196). A fault
holds its size on every step, so the size it held is the excursion's mean without its largest
step: a one-step excursion held nothing (NaN), nor does a two-step one (what is left is one
step: a Student-t tail next to a GC pause, demo job 100078: +11.3 % and +30.7 %; a fault's
excursion has at least the fast test's steps at its clip, 3-4, when it alarms), and a slow
GPU's steps barely move. An excursion of more than ``RECENT`` samples keeps its plain mean
(one step moves it by under ``R_HIGH / RECENT``, and its steps are no longer all kept). Likewise a one-step excursion's
size since onset is taken without that step (``after_onset``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: an excursion of fewer steps holds no size (NaN): less its largest, one step is left
MIN_HELD = 3


@dataclass(frozen=True, slots=True)
class Alarms:
    """Alarmed ranks (indices into the rank axis) and what the test knew about each."""

    index: np.ndarray
    since_step: np.ndarray
    detected_step: np.ndarray
    detector: np.ndarray  # 0 = fast, 1 = slow, 2 = level shift (``shift.py``)
    score: np.ndarray
    mean_log_ratio: np.ndarray
    se_log_ratio: np.ndarray
    peak_log_ratio: np.ndarray  # the excursion's mean log-ratio when the test alarmed
    held_log_ratio: np.ndarray  # ... less its largest step (``held.py``)
    #: where the excursion that alarmed was one step: the mean log-ratio since onset without
    #: that step (NaN when no later step has a value); else the mean since onset
    after_log_ratio: np.ndarray


def held_peak(sums: np.ndarray, r: np.ndarray, ok: np.ndarray, steps: np.ndarray,
              since: np.ndarray, at: np.ndarray, cols: np.ndarray, before: np.ndarray,
              recent: int) -> np.ndarray:
    """Per alarmed column ``cols[i]``: the mean log-ratio of its excursion (``sums[:, i]``:
    sum and count of its values, from step ``since[i]`` to block row ``at[i]``) less its
    largest value. ``r`` and ``ok``: the block's clipped log-ratios and which are values;
    ``before``: (rows, len(cols)) the tested rows before the block, oldest first, NaN where
    missing (the excursion's values before the block are the last of them)."""
    out = np.full(cols.size, np.nan)
    rows = np.arange(steps.size)
    for i, c in enumerate(cols.tolist()):
        total, n = float(sums[0, i]), int(round(float(sums[1, i])))
        if n > recent:
            out[i] = total / n
            continue
        if n < MIN_HELD:
            continue
        vals = r[(steps >= since[i]) & (rows <= at[i]) & ok[:, c], c]
        prior = n - vals.size
        if prior > 0:
            b = before[:, i]
            vals = np.concatenate([b[np.isfinite(b)][-prior:], vals])
        out[i] = (total - float(vals.max())) / (n - 1) if vals.size else total / n
    return out


def after_onset(total: np.ndarray, cnt: np.ndarray, peak: np.ndarray, count: np.ndarray,
                ) -> np.ndarray:
    """``Alarms.after_log_ratio``: per alarm, from the sum and count of its log-ratios since
    onset, and its excursion's mean and count when it alarmed: where that excursion was one
    step, the mean since onset without it (NaN when no later step has a value); else the mean
    since onset."""
    one = count == 1
    with np.errstate(invalid="ignore", divide="ignore"):
        out: np.ndarray = np.where(one, (total - peak) / (cnt - 1), total / np.maximum(cnt, 1))
    out[one & (cnt < 2)] = np.nan
    return out

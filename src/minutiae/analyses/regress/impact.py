"""What a measured change is worth across the fleet's actual usage (pure).

``impact(runs, speedup=0.008, where="NCCL>=2.21")``: the runs the filter selects used H
GPU-hours over a history of W weeks; a change that makes their steps ``speedup`` shorter saves
``speedup × H / W`` GPU-hours per week (reported in GPU-days per week, i.e. / 24).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minutiae.analyses.regress.where import Where
from minutiae.errors import DataError
from minutiae.history.record import RunRecord

WEEK = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class Impact:
    """``gpu_days_per_week``: GPU-days saved per week (negative: lost, for a slowdown) at the
    usage rate of the history. ``low``/``high``: the same from the slowest and busiest of the
    history's whole weeks (how much it swings with usage; None with less than two whole weeks).
    ``share``: matched GPU-hours / all GPU-hours. ``runs_unknown``: runs lacking an attribute the
    filter needs (left out: they may or may not benefit). ``runs_without_usage``: matched runs
    without GPU count or duration (left out of the sum)."""

    speedup: float
    where: str
    runs_total: int
    runs_matched: int
    runs_unknown: int
    runs_without_usage: int
    gpu_hours_matched: float
    share: float
    weeks: float
    gpu_days_per_week: float
    low: float | None
    high: float | None

    def to_json(self) -> dict[str, Any]:
        r = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("gpu_hours_matched", "share", "weeks", "gpu_days_per_week", "low", "high"):
            if r[k] is not None:
                r[k] = round(r[k], 4)
        return r


def impact(runs: Sequence[RunRecord], speedup: float, where: Where) -> Impact:
    if not runs:
        raise DataError("no runs in the history")
    matched, unknown, no_usage = [], 0, 0
    total_h = 0.0
    for r in runs:
        h = r.gpu_hours()
        total_h += h or 0.0
        m = where.matches(r)
        if m is None:
            unknown += 1
        elif m:
            if h is None:
                no_usage += 1
            else:
                matched.append((r.time, h))
    if total_h <= 0:
        raise DataError("no run has GPU count and duration (columns gpus or world_size, and duration_s "
                        "or start/end, or gpu_hours): usage cannot be measured")
    t0 = min(r.time for r in runs)
    t1 = max(r.time + (r.duration_s or 0.0) for r in runs)
    weeks = max((t1 - t0) / WEEK, 1.0 / 7.0)
    hours = sum(h for _, h in matched)
    per_week = speedup * hours / weeks / 24.0
    low = high = None
    whole = int(math.floor((t1 - t0) / WEEK))
    if whole >= 2 and matched:
        times = np.array([t for t, _ in matched])
        hs = np.array([h for _, h in matched])
        idx = np.floor((times - t0) / WEEK).astype(int)
        weekly = np.bincount(idx[idx < whole], weights=hs[idx < whole], minlength=whole)
        vals = speedup * weekly / 24.0
        low, high = float(vals.min()), float(vals.max())
        if low > high:
            low, high = high, low
    return Impact(speedup, str(where), len(runs), len(matched), unknown, no_usage, hours,
                  hours / total_h, weeks, per_week, low, high)

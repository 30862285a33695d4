"""Has an alarmed rank recovered since it alarmed? (``moving.py`` judges moving work on it.)

A hot expert in a mixture-of-experts job can come back to a rank it left: that rank is slow
now and was slow at its alarm, yet was not slow for tens of steps in between. What ``moving``
needs is the lowest mean log-ratio of each alarmed rank over ``LAST`` consecutive tested steps
since its alarm: a GPU or node fault stays (its windows stay near its size), a hot spot that
left does not.
"""

from __future__ import annotations

import numpy as np

#: steps a suspect's recovery is judged on
LAST = 20

__all__ = ["LAST", "Recovery"]


class Recovery:
    """Per rank: the lowest mean log-ratio over ``LAST`` consecutive tested steps since it
    alarmed (``inf``: none yet), fed block by block; the last ``LAST - 1`` rows are carried, so
    any split into blocks gives the same answer. Only alarmed ranks are computed."""

    def __init__(self, n: int) -> None:
        self.low = np.full(n, np.inf)
        self.tail = np.full((LAST - 1, n), np.nan, dtype=np.float32)

    def add(self, r: np.ndarray, missing: np.ndarray | None, after: np.ndarray | None) -> None:
        """``r`` (steps, ranks) the block's log-ratios; ``after``: where a rank had alarmed
        (None: no rank has)."""
        if after is None:  # no rank has alarmed: nothing to carry
            self.tail[:] = np.nan
            return
        x = r.astype(np.float32)
        if missing is not None:
            x[missing] = np.nan
        x[~after] = np.nan
        x = np.concatenate([self.tail, x])
        self.tail = x[-(LAST - 1):]
        cols = np.flatnonzero(np.isfinite(x).any(axis=0))
        if cols.size == 0:
            return
        # each window summed on its own (the same values in the same order whatever the blocks)
        v = np.lib.stride_tricks.sliding_window_view(x[:, cols], LAST, axis=0)
        ok = np.isfinite(v)
        n = ok.sum(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n >= LAST // 2, np.where(ok, v, 0.0).sum(axis=-1) / n, np.inf)
        self.low[cols] = np.minimum(self.low[cols], mean.min(axis=0))

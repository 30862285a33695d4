"""What the noise fit (``armodel.fit``) is matched to: the variogram of the standardised peer
ratios, pooled over ranks and accumulated over the whole job.

Two kinds of row. A **lag** row ``h``: ``E[(z_t - z_{t-h})^2]``, single steps ``h`` apart.
A **block** row ``B``: ``E[(m_k - m_{k-1})^2]``, ``m_k`` the mean of a rank's ``k``-th run of
``B`` steps (runs counted from the variogram's first row, so any split of the rows into blocks
gives the same runs). A persistent offset (the silicon lottery) cancels in both. A block mean
keeps ``1/B`` of the white part but nearly all of a slow wander, so block rows tell a small
phi-0.99 wander from no wander many times more precisely than single-step lags of the same
reach, where the white part drowns it (``bench/stragglers/lottery_fit.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["BINS", "BLOCKS", "FIT_COLUMNS", "LAGS", "SPIKE_DIFF", "Moments", "Variogram",
           "columns", "unit_columns"]

#: at most this many ranks (evenly strided) enter the variogram: with 100 steps its values rest
#: on ~50,000 differences each (a relative error of ~0.6 %), whatever the job's size
FIT_COLUMNS = 512
#: lags the variogram is taken at (those shorter than half the stretch fitted)
LAGS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)
#: block lengths whose consecutive means are compared
BLOCKS = (8, 16, 32)


def columns(n: int) -> np.ndarray:
    """The ranks (evenly strided, at most ``FIT_COLUMNS``) a variogram pools."""
    return np.arange(0, n, max(1, n // FIT_COLUMNS))


def unit_columns(units: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(columns, their unit ids) for a variogram of within-unit contrasts: the ranks of units
    of at least two (evenly strided over the units, at most ~``FIT_COLUMNS`` ranks), ordered
    by unit; None when no unit has two ranks. A unit is the ranks of one node that share
    its per-step factor (TP-shared noise): less their unit's mean, that factor (white noise
    that hides the wander) is gone and the AR coefficient, a property of each GPU, is seen
    with a larger share of the variance."""
    ids, counts = np.unique(units, return_counts=True)
    multi = ids[counts >= 2]
    if multi.size == 0:
        return None
    per = float(np.median(counts[counts >= 2]))
    multi = multi[::max(1, int(multi.size * per) // FIT_COLUMNS)]
    cols = np.flatnonzero(np.isin(units, multi))
    cols = cols[np.argsort(units[cols], kind="stable")]
    return cols, units[cols]


#: a difference of standardised ratios beyond this is a spike (GC pause, checkpoint), not
#: noise: 5 sigmas of the widest a difference can be (twice the ratios' whole variance; a
#: difference of two runs' means is no wider, so the same grid and cut serve the block rows)
SPIKE_DIFF = 5.0 * math.sqrt(2.0)
#: absolute differences are counted on this grid over [0, SPIKE_DIFF] (integer counts: any
#: split into blocks gives the same counts, so streaming and a whole file fit the same model)
BINS = 1024
_CENTRES = (np.arange(BINS) + 0.5) * (SPIKE_DIFF / BINS)
#: variance of a standard normal truncated to +-3 (the trimmed mean square's correction)
_TRUNC3 = 1.0 - 6.0 * math.exp(-4.5) / math.sqrt(2 * math.pi) / math.erf(3.0 / math.sqrt(2.0))


@dataclass(frozen=True, slots=True)
class Moments:
    """A variogram's rows with at least 8 differences: per row its lag (steps between the
    values compared), block length (1: single steps), mean square ``v`` and the differences
    it rests on; lag rows first, in ``LAGS`` order. ``total``: the ratios' own robust variance
    (lottery offsets included: what the AR part may not exceed; NaN when unmeasured)."""

    lags: np.ndarray
    blocks: np.ndarray
    v: np.ndarray
    n: np.ndarray
    total: float

    @property
    def single(self) -> np.ndarray:
        """Which rows are single-step lags."""
        return np.asarray(self.blocks == 1)


class Variogram:
    """The lag and block rows (module docstring) of standardised ratios, pooled over the ranks
    ``cols`` and accumulated block by block over the whole job (the last ``max(LAGS)`` rows,
    and each block length's unfinished run and last mean, are kept for the next block). Each
    value is robust, like ``calib.noise_sigma``: the mean square of the differences within 3
    robust sigmas (1.4826 x their median), corrected for the truncation, from a histogram of
    ``|d|``; so a minority of ranks whose level steps (a fault not yet alarmed, a hot expert)
    does not pass for wander, and spikes beyond ``SPIKE_DIFF`` and missing values drop out (a
    run with a missing value has no mean). Rows of a rank from its alarm on are left out."""

    def __init__(self, cols: np.ndarray, units: np.ndarray | None = None) -> None:
        """``units``: per column of ``cols``, a unit id (contiguous runs, each of >= 2
        columns): each row is then taken less its unit's mean (``unit_columns``)."""
        self.cols = cols
        self.starts = None if units is None else np.flatnonzero(np.r_[True, units[1:] != units[:-1]])
        self.tail = np.zeros((0, cols.size), dtype=np.float32)
        self.hist = np.zeros((1 + len(LAGS) + len(BLOCKS), BINS), dtype=np.int64)
        self.runs = [np.zeros((0, cols.size), dtype=np.float32) for _ in BLOCKS]
        self.last = [np.zeros((0, cols.size)) for _ in BLOCKS]

    def _count(self, i: int, a: np.ndarray) -> None:
        idx = a.ravel() * np.float32(BINS / SPIKE_DIFF)
        # NaN (missing) and spikes go to an extra bin, dropped (cheaper than a selection)
        np.fmin(idx, np.float32(BINS), out=idx)
        self.hist[i] += np.bincount(idx.astype(np.int64), minlength=BINS + 1)[:BINS]

    def add(self, r: np.ndarray, scale: np.ndarray | None = None,
            missing: np.ndarray | None = None, gone: np.ndarray | None = None) -> None:
        """Add the rows ``r / scale`` (steps, ranks; NaN or ``missing`` where missing;
        ``gone``: where a rank had alarmed, left out too)."""
        sub = r[:, self.cols].astype(np.float32)
        if scale is not None:
            sub /= scale[self.cols].astype(np.float32)
        for mask in (missing, gone):
            if mask is not None:
                sub[mask[:, self.cols]] = np.nan
        if self.starts is not None:
            sub = self._less_unit_mean(sub)
        x = np.concatenate([self.tail, sub]) if self.tail.size else sub
        t = self.tail.shape[0]
        for i, h in enumerate(LAGS, start=1):
            lo = max(t, h)
            if x.shape[0] <= lo:
                break
            self._count(i, np.abs(x[lo:] - x[lo - h:x.shape[0] - h]))
        self._count(0, np.abs(sub))
        self.tail = x[-LAGS[-1]:]
        self._add_runs(sub)

    def _add_runs(self, sub: np.ndarray) -> None:
        """The block rows: each finished run's mean less the previous one's."""
        for j, b in enumerate(BLOCKS):
            x = np.concatenate([self.runs[j], sub]) if self.runs[j].size else sub
            k = x.shape[0] // b
            self.runs[j] = x[k * b:]
            if not k:
                continue
            means = x[:k * b].reshape(k, b, x.shape[1]).mean(axis=1, dtype=np.float64)
            seq = np.concatenate([self.last[j], means])
            self.last[j] = means[-1:]
            if seq.shape[0] > 1:
                self._count(1 + len(LAGS) + j, np.abs(seq[1:] - seq[:-1]).astype(np.float32))

    def _less_unit_mean(self, sub: np.ndarray) -> np.ndarray:
        """Each value less the mean of its unit's values at that step (NaN left out)."""
        assert self.starts is not None
        ok = np.isfinite(sub)
        sums = np.add.reduceat(np.where(ok, sub, np.float32(0.0)), self.starts, axis=1)
        counts = np.add.reduceat(ok.astype(np.float32), self.starts, axis=1)
        sizes = np.diff(np.r_[self.starts, sub.shape[1]])
        with np.errstate(invalid="ignore", divide="ignore"):
            out: np.ndarray = sub - np.repeat(sums / counts, sizes, axis=1)
        return out

    def values(self) -> Moments:
        """The rows with at least 8 differences (``Moments``)."""
        c = self.hist.astype(np.float64)
        n = c.sum(axis=1)
        half = np.argmax(np.cumsum(c, axis=1) >= (n / 2)[:, None], axis=1)
        inner = c * (_CENTRES[None, :] <= 3.0 * 1.4826 * _CENTRES[half][:, None])
        with np.errstate(invalid="ignore", divide="ignore"):
            v = (inner @ (_CENTRES ** 2)) / inner.sum(axis=1) / _TRUNC3
        lags = np.array([*LAGS, *BLOCKS], dtype=np.float64)
        blocks = np.array([1] * len(LAGS) + list(BLOCKS), dtype=np.float64)
        ok = (n[1:] >= 8) & (v[1:] > 0)
        total = float(v[0]) if n[0] >= 8 else float("nan")
        return Moments(lags[ok], blocks[ok], v[1:][ok], n[1:][ok], total)

"""The noise model of a rank's peer log-ratio, and how it is estimated from the job itself.

    r_t = offset + a_t + e_t,   a_t = phi a_{t-1} + innovation (AR(1): power capping, thermals)

with ``e`` white (per-step jitter, per-node shared noise, Student-t tails) and ``offset`` a
persistent per-GPU difference (the silicon lottery; ``floor.py`` judges it). The job-wide
factor of each step cancels in the peer ratio; a per-node shared factor is part of ``e`` for
the rank tests and the node test's own noise (``nodes.py``).

Fitting (``fit``): the variogram ``v(h) = E[(r_t - r_{t-h})^2]`` pooled over ranks (the offset
cancels in differences, so the lottery is not taken for wander; robust, so a minority of ranks
whose level steps is not either) is matched by ``2 w + 2 a (1 - phi^h)`` by weighted least
squares for every phi on a grid. A short warm-up sees only the first few lags, where slow
wander and a larger, slower one look alike: of the models within a chi-square(1) 95 % margin
of the best fit, the one with the largest long-run variance is taken (more whitening: fewer
false alarms, some power lost), and ``a + w`` may not exceed the ratios' own variance. The
variogram accumulates over the whole job (``Variogram``) and the model is refitted as it runs
(``whiten.NoiseState``), so the lags that tell the two apart are used once they exist.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

#: the AR coefficients tried (0 = white noise), finer where the long-run variance
#: ``(1 + phi) / (1 - phi)`` moves fastest
PHIS = np.array([0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.84, 0.87, 0.9, 0.92, 0.93, 0.94, 0.95,
                 0.96, 0.965, 0.97, 0.975, 0.98, 0.985, 0.99])
#: chi-square(1) 95 % quantile: phis within this of the best weighted fit are consistent
FIT_MARGIN = 3.84
#: at most this many ranks (evenly strided) enter the variogram: with 100 steps its values rest
#: on ~50,000 differences each (a relative error of ~0.6 %), whatever the job's size
FIT_COLUMNS = 512
#: lags the variogram is taken at (those shorter than half the stretch fitted)
LAGS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)
#: below this AR share of the variance the model is white noise
MIN_SHARE = 0.02
@dataclass(frozen=True, slots=True)
class ArModel:
    """AR(1) + white noise in units of the ratios' variance: ``a`` the AR part, ``w`` the white
    part, ``phi`` the AR coefficient per tested step."""

    phi: float = 0.0
    a: float = 0.0
    w: float = 1.0

    @property
    def white(self) -> bool:
        return self.phi <= 0.0 or self.a <= MIN_SHARE * (self.a + self.w)

    def gain(self) -> float:
        """The steady-state Kalman gain (the Riccati recursion iterated to its fixed point)."""
        return 0.0 if self.white else _gain(self.phi, self.a, self.w)

    def passes(self) -> float:
        """The share of a lasting shift the innovations keep once the filter has settled."""
        if self.white:
            return 1.0
        k = self.gain()
        return (1.0 - self.phi) / (1.0 - self.phi + self.phi * k)

    def sum_var(self, n: np.ndarray) -> np.ndarray:
        """Variance of the sum of ``n`` consecutive ratios about their offset (units of the
        ratios' variance): ``w n + a (n (1 + phi) / (1 - phi) - 2 phi (1 - phi^n) / (1 - phi)^2)``."""
        n = np.asarray(n, dtype=np.float64)
        if self.white:
            return (self.a + self.w) * n
        p = self.phi
        return self.w * n + self.a * (n * (1 + p) / (1 - p) - 2 * p * (1 - p ** n) / (1 - p) ** 2)

    def to_json(self) -> dict[str, float]:
        return {"phi": self.phi, "ar_share": round(self.a, 4), "white_share": round(self.w, 4),
                "passes": round(self.passes(), 4)}


@functools.lru_cache(maxsize=4096)
def _gain(phi: float, a: float, w: float) -> float:
    """``ArModel.gain`` of an AR model (cached: a job's refits ask for the same few models
    thousands of times)."""
    w = max(w, 1e-6 * a)
    q = a * (1.0 - phi * phi)
    pred = a
    for _ in range(500):
        new = phi * phi * pred * w / (pred + w) + q
        if abs(new - pred) <= 1e-12 * pred:
            break
        pred = new
    return pred / (pred + w)


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
#: noise: 5 sigmas of the widest a difference can be (twice the ratios' whole variance)
SPIKE_DIFF = 5.0 * math.sqrt(2.0)
#: absolute differences are counted on this grid over [0, SPIKE_DIFF] (integer counts: any
#: split into blocks gives the same counts, so streaming and a whole file fit the same model)
BINS = 1024
_CENTRES = (np.arange(BINS) + 0.5) * (SPIKE_DIFF / BINS)
#: variance of a standard normal truncated to +-3 (the trimmed mean square's correction)
_TRUNC3 = 1.0 - 6.0 * math.exp(-4.5) / math.sqrt(2 * math.pi) / math.erf(3.0 / math.sqrt(2.0))


class Variogram:
    """``v(h) = E[(z_t - z_{t-h})^2]`` of standardised ratios at every lag of ``LAGS``, pooled
    over the ranks ``cols`` and accumulated block by block over the whole job (the last
    ``max(LAGS)`` rows are kept to pair with the next block). Each value is robust, like
    ``calib.noise_sigma``: the mean square of the differences within 3 robust sigmas (1.4826 x
    their median), corrected for the truncation, from a histogram of ``|d|``; so a minority of
    ranks whose level steps (a fault not yet alarmed, a hot expert) does not pass for wander,
    and spikes beyond ``SPIKE_DIFF`` and missing values drop out. Rows of a rank from its alarm
    on are left out. Also the ratios' own robust variance (lottery offsets included, a minority
    of slow units not: what the AR part may not exceed)."""

    def __init__(self, cols: np.ndarray, units: np.ndarray | None = None) -> None:
        """``units``: per column of ``cols``, a unit id (contiguous runs, each of >= 2
        columns): each row is then taken less its unit's mean (``unit_columns``)."""
        self.cols = cols
        self.starts = None if units is None else np.flatnonzero(np.r_[True, units[1:] != units[:-1]])
        self.tail = np.zeros((0, cols.size), dtype=np.float32)
        self.hist = np.zeros((len(LAGS) + 1, BINS), dtype=np.int64)

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

    def values(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """(lags, v(h), differences each rests on, the ratios' robust variance) for the lags
        with at least 8 differences."""
        c = self.hist.astype(np.float64)
        n = c.sum(axis=1)
        half = np.argmax(np.cumsum(c, axis=1) >= (n / 2)[:, None], axis=1)
        inner = c * (_CENTRES[None, :] <= 3.0 * 1.4826 * _CENTRES[half][:, None])
        with np.errstate(invalid="ignore", divide="ignore"):
            v = (inner @ (_CENTRES ** 2)) / inner.sum(axis=1) / _TRUNC3
        ok = (n[1:] >= 8) & (v[1:] > 0)
        total = float(v[0]) if n[0] >= 8 else float("nan")
        return np.array(LAGS, dtype=np.float64)[ok], v[1:][ok], n[1:][ok], total


def _fits(lags: np.ndarray, v: np.ndarray, wts: np.ndarray, bound: float,
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every phi of ``PHIS``: (weighted residual, w, a) of ``v = 2 w + 2 a (1 - phi^h)``
    with ``w, a >= 0`` and ``w + a <= bound`` (normal equations, all phis at once)."""
    b = 1.0 - PHIS[:, None] ** lags[None, :]
    s0, t0 = wts.sum(), (wts * v).sum()
    s1, s2 = (wts * b).sum(axis=1), (wts * b * b).sum(axis=1)
    t1 = (wts * v * b).sum(axis=1)
    det = s0 * s2 - s1 * s1
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(det > 0, (t0 * s2 - s1 * t1) / (2 * det), t0 / (2 * s0))
        a = np.where(det > 0, (s0 * t1 - s1 * t0) / (2 * det), 0.0)
        # at the bound: a = bound - w, w from its own normal equation
        wb = (t0 / 2 - bound * s1) / (s0 - s1)
    over = a > bound - w
    w, a = np.where(over, wb, w), np.where(over, bound - wb, a)
    white = (PHIS <= 0) | ~(a >= 0) | ~(w >= 0)
    w, a = np.where(white, t0 / (2 * s0), w), np.where(white, 0.0, a)
    resid = (wts * (v - 2 * w[:, None] - 2 * a[:, None] * b) ** 2).sum(axis=1)
    return resid, w, a


def _largest(lags: np.ndarray, v: np.ndarray, wts: np.ndarray, bound: float, most: float,
             ) -> tuple[np.ndarray, np.ndarray]:
    """For every phi: the largest AR part ``a`` (and its ``w``) whose weighted residual is
    within ``most`` and with ``w >= 0``, ``a + w <= bound`` (-1 where none is). With ``w`` at
    its best for each ``a`` the residual is ``R(a) = Svv - 4 a Svb + 4 a^2 Sbb`` (weighted
    sums of squares and products about the weighted means), so the answer is a root."""
    b = 1.0 - PHIS[:, None] ** lags[None, :]
    s0 = wts.sum()
    vbar, bbar = float((wts * v).sum() / s0), (wts * b).sum(axis=1) / s0
    dv, db = v - vbar, b - bbar[:, None]
    svv, svb, sbb = float((wts * dv * dv).sum()), (wts * dv * db).sum(axis=1), (wts * db * db).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        disc = svb * svb - sbb * (svv - most)
        a = (svb + np.sqrt(np.maximum(disc, 0.0))) / (2.0 * sbb)
        # w = (vbar - 2 a bbar) / 2 >= 0 and a + w <= bound
        cap = np.minimum(vbar / (2.0 * bbar), np.where(bbar < 1, (bound - vbar / 2) / (1 - bbar), np.inf))
        lo = (svb - np.sqrt(np.maximum(disc, 0.0))) / (2.0 * sbb)
    a = np.minimum(a, cap)
    ok = (PHIS > 0) & (disc >= 0) & (sbb > 0) & (a >= np.maximum(lo, 0.0))
    a = np.where(ok, a, -1.0)
    return a, (vbar - 2.0 * np.maximum(a, 0.0) * bbar) / 2.0


#: a variogram resting on fewer lag-1 differences than this is too thin to fit a series of its
#: own (a node test of 8 nodes over a 20-step warm-up: 152): it takes ``fit``'s fallback
MIN_DIFFS = 1000


def _candidates(lags: np.ndarray, v: np.ndarray, n: np.ndarray, total: float,
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per phi of ``PHIS``: the largest AR part within the fit margin and its white part
    (``a`` -1 where the phi is not consistent with the variogram; ``fit``)."""
    bound = total if np.isfinite(total) and total > 0 else float(v.max() / 2)
    wts = n / (2.0 * v * v)  # 1 / var(v_hat) for a chi-square variance estimate
    resid, _, _ = _fits(lags, v, wts, bound)
    best = float(resid.min())
    margin = FIT_MARGIN * max(1.0, best / max(lags.size - 3, 1))
    return _largest(lags, v, wts, bound, best + margin)


def consistent(lags: np.ndarray, v: np.ndarray, n: np.ndarray, total: float) -> np.ndarray | None:
    """Which phis of ``PHIS`` a variogram (``Variogram.values``) is consistent with: the
    set ``fit`` picks from; None when it is too thin to say (fewer than three lags)."""
    if lags.size < 3:
        return None
    return np.asarray(_candidates(lags, v, n, total)[0] > 0)


def fit(lags: np.ndarray, v: np.ndarray, n: np.ndarray, total: float,
        fallback: ArModel | None = None, within: np.ndarray | None = None) -> ArModel:
    """The AR(1) + white model of a variogram (``Variogram.values``; module docstring): white
    noise when fewer than three lags are measured or no AR part is seen.

    Of the models that fit within a chi-square(1) 95 % margin of the best fit, the one with
    the largest long-run variance ``w + a (1 + phi) / (1 - phi)`` (the most whitening) is
    taken: the few lags of a short warm-up cannot tell slow wander from a persistent offset,
    and under-whitening would break the false-alarm budget where over-whitening costs power;
    refits on the job's longer stretches narrow the choice. The weights take the lags as
    independent, which they are not (differences share values): the margin is widened by the
    dispersion the best fit leaves (quasi-likelihood), never narrowed. With ``fallback`` (the
    rank tests' model, for the node test), a variogram thinner than ``MIN_DIFFS`` takes it.
    With ``within`` (the phis another view of the same job is consistent with:
    ``consistent``), the pick is among the phis both allow, when any is."""
    if fallback is not None and (lags.size == 0 or lags[0] != 1 or n[0] < MIN_DIFFS):
        return fallback
    if lags.size < 3:
        return ArModel()
    a, w = _candidates(lags, v, n, total)
    if within is not None and (within & (a > 0)).any():
        a = np.where(within, a, -1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        lrv = np.where(a > 0, w + a * (1 + PHIS) / (1 - PHIS), 0.0)
    i = int(np.argmax(lrv))
    if not lrv[i] > 0:
        return ArModel()
    model = ArModel(float(PHIS[i]), float(a[i]), float(w[i]))
    return ArModel() if model.white else model


def fit_rows(z: np.ndarray, fallback: ArModel | None = None) -> ArModel:
    """``fit`` on the variogram of the standardised ratios ``z`` (steps, ranks)."""
    vg = Variogram(columns(z.shape[1]))
    vg.add(z)
    return fit(*vg.values(), fallback=fallback)



"""The noise model of a rank's peer log-ratio, and how it is estimated from the job itself.

    r_t = offset + a_t + e_t,   a_t = phi a_{t-1} + innovation (AR(1): power capping, thermals)

with ``e`` white (per-step jitter, per-node shared noise, Student-t tails) and ``offset`` a
persistent per-GPU difference (the silicon lottery; ``floor.py`` judges it). The job-wide
factor of each step cancels in the peer ratio; a per-node shared factor is part of ``e`` for
the rank tests and the node test's own noise (``nodes.py``).

Fitting (``fit``): the variogram (``variogram.py``: single-step differences ``h`` apart and
differences of consecutive means of ``B``-step runs) pooled over ranks (the offset cancels in
differences, so the lottery is not taken for wander; robust, so a minority of ranks whose
level steps is not either) is matched by its expectation under the model (``design``; ``2 w +
2 a (1 - phi^h)`` for a lag) by weighted least squares for every phi on a grid. A short
warm-up sees only the first few lags, where slow wander and a larger, slower one look alike:
of the models within a chi-square(1) 95 % margin of the best fit, the one with the largest
long-run variance is taken (more whitening: fewer false alarms, some power lost), and ``a +
w`` may not exceed the ratios' own variance (which includes the lottery: so a 20-step warm-up
under a lottery takes phi 0.99). The variogram accumulates over the whole job and the model is
refitted as it runs (``whiten.NoiseState``), so the rows that tell the two apart are used once
they exist: the block rows, which keep ``1/B`` of the white part and nearly all of a slow
wander, rule out the lottery's phi 0.99 by the first refits.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from minutiae.analyses.stragglers.variogram import Moments, Variogram, columns

#: the AR coefficients tried (0 = white noise), finer where the long-run variance
#: ``(1 + phi) / (1 - phi)`` moves fastest
PHIS = np.array([0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.84, 0.87, 0.9, 0.92, 0.93, 0.94, 0.95,
                 0.96, 0.965, 0.97, 0.975, 0.98, 0.985, 0.99])
#: chi-square(1) 95 % quantile: phis within this of the best weighted fit are consistent
FIT_MARGIN = 3.84
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


def design(m: Moments) -> tuple[np.ndarray, np.ndarray]:
    """The model's expectation of each row, ``v = cw w + ca a``: (``cw`` per row, ``ca`` per
    phi of ``PHIS`` and row). For means of runs of ``B`` steps ``h`` apart (``h >= B``; a lag
    row is ``B = 1``): ``cw = 2 / B`` and ``ca = 2 (V - C)`` with ``V = sum_var(B) / B^2`` (the
    AR part of a run's mean, unit variance) and ``C = phi^(h - B + 1) S^2 / B^2``, ``S = (1 -
    phi^B) / (1 - phi)`` (two runs' covariance); for ``B = 1``, ``ca = 2 (1 - phi^h)``."""
    p, h, b = PHIS[:, None], m.lags[None, :], m.blocks[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(p < 1.0, 1.0 - p, 1.0)
        s = (1.0 - p ** b) / q
        var = (b * (1.0 + p) / q - 2.0 * p * (1.0 - p ** b) / (q * q)) / (b * b)
        ca = 2.0 * (var - p ** (h - b + 1.0) * s * s / (b * b))
    ca = np.where(b == 1, 2.0 * (1.0 - p ** h), ca)
    return 2.0 / m.blocks, ca


def _fits(m: Moments, wts: np.ndarray, bound: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every phi of ``PHIS``: (weighted residual, w, a) of ``v = cw w + ca a``
    (``design``) with ``w, a >= 0`` and ``w + a <= bound`` (normal equations, all phis at
    once)."""
    cw, ca = design(m)
    v = m.v
    sww, swa, saa = (wts * cw * cw).sum(), (wts * cw * ca).sum(axis=1), (wts * ca * ca).sum(axis=1)
    yw, ya = (wts * cw * v).sum(), (wts * ca * v).sum(axis=1)
    det = sww * saa - swa * swa
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(det > 0, (saa * yw - swa * ya) / det, yw / sww)
        a = np.where(det > 0, (sww * ya - swa * yw) / det, 0.0)
        # at the bound: a = bound - w, w from its own normal equation
        wb = (yw - bound * swa) / (sww - swa)
    over = a > bound - w
    w, a = np.where(over, wb, w), np.where(over, bound - wb, a)
    white = (PHIS <= 0) | ~(a >= 0) | ~(w >= 0)
    w, a = np.where(white, yw / sww, w), np.where(white, 0.0, a)
    resid = (wts * (v - cw * w[:, None] - ca * a[:, None]) ** 2).sum(axis=1)
    return resid, w, a


def _largest(m: Moments, wts: np.ndarray, bound: float, most: float,
             ) -> tuple[np.ndarray, np.ndarray]:
    """For every phi: the largest AR part ``a`` (and its ``w``) whose weighted residual is
    within ``most`` and with ``w >= 0``, ``a + w <= bound`` (-1 where none is). With ``w`` at
    its best for each ``a`` (``w = (Syw - a Swa) / Sww``) the residual is ``R(a) = Svv - 2 a
    Sva + a^2 Saa`` (weighted sums of ``v`` and ``ca`` less their projection on ``cw``), so
    the answer is a root."""
    cw, ca = design(m)
    sww = float((wts * cw * cw).sum())
    swa, yw = (wts * cw * ca).sum(axis=1), float((wts * cw * m.v).sum())
    dv = m.v - cw * (yw / sww)
    da = ca - cw[None, :] * (swa / sww)[:, None]
    svv, sva, saa = float((wts * dv * dv).sum()), (wts * dv * da).sum(axis=1), (wts * da * da).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        disc = sva * sva - saa * (svv - most)
        a = (sva + np.sqrt(np.maximum(disc, 0.0))) / saa
        # w >= 0 and a + w <= bound
        frac = swa / sww
        cap = np.minimum(yw / swa, np.where(frac < 1, (bound - yw / sww) / (1 - frac), np.inf))
        lo = (sva - np.sqrt(np.maximum(disc, 0.0))) / saa
    a = np.minimum(a, cap)
    ok = (PHIS > 0) & (disc >= 0) & (saa > 0) & (a >= np.maximum(lo, 0.0))
    a = np.where(ok, a, -1.0)
    return a, (yw - np.maximum(a, 0.0) * swa) / sww


#: a variogram resting on fewer lag-1 differences than this is too thin to fit a series of its
#: own (a node test of 8 nodes over a 20-step warm-up: 152): it takes ``fit``'s fallback
MIN_DIFFS = 1000


def _candidates(m: Moments) -> tuple[np.ndarray, np.ndarray]:
    """Per phi of ``PHIS``: the largest AR part within the fit margin and its white part
    (``a`` -1 where the phi is not consistent with the variogram; ``fit``)."""
    bound = m.total if np.isfinite(m.total) and m.total > 0 else float(m.v.max() / 2)
    wts = m.n / (2.0 * m.v * m.v)  # 1 / var(v_hat) for a chi-square variance estimate
    resid, _, _ = _fits(m, wts, bound)
    best = float(resid.min())
    margin = FIT_MARGIN * max(1.0, best / max(m.v.size - 3, 1))
    return _largest(m, wts, bound, best + margin)


def consistent(m: Moments) -> np.ndarray | None:
    """Which phis of ``PHIS`` a variogram (``Variogram.values``) is consistent with: the
    set ``fit`` picks from; None when it is too thin to say (fewer than three lags)."""
    if int(m.single.sum()) < 3:
        return None
    return np.asarray(_candidates(m)[0] > 0)


def fit(m: Moments, fallback: ArModel | None = None, within: np.ndarray | None = None) -> ArModel:
    """The AR(1) + white model of a variogram (``Variogram.values``; module docstring): white
    noise when fewer than three lags are measured or no AR part is seen.

    Of the models that fit within a chi-square(1) 95 % margin of the best fit, the one with
    the largest long-run variance ``w + a (1 + phi) / (1 - phi)`` (the most whitening) is
    taken: the few lags of a short warm-up cannot tell slow wander from a persistent offset,
    and under-whitening would break the false-alarm budget where over-whitening costs power;
    refits on the job's longer stretches (and their block rows) narrow the choice. The
    weights take the rows as independent, which they are not (differences share values): the
    margin is widened by the dispersion the best fit leaves (quasi-likelihood), never
    narrowed. With ``fallback`` (the rank tests' model, for the node test), a variogram
    thinner than ``MIN_DIFFS`` takes it. With ``within`` (the phis another view of the same
    job is consistent with: ``consistent``), the pick is among the phis both allow, when any
    is."""
    single = m.single
    if fallback is not None and (not single.any() or m.lags[0] != 1 or m.n[0] < MIN_DIFFS):
        return fallback
    if int(single.sum()) < 3:
        return ArModel()
    a, w = _candidates(m)
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
    return fit(vg.values(), fallback=fallback)

"""The level-shift test of whitened ratios: what a lasting slowdown leaves in the innovations.

Under the AR(1) + white model (``armodel.py``) a rank that becomes slower by ``D`` (log-ratio)
at step t0 leaves innovations ``D g_j`` at ``t0 + j`` with the signature

    g_j = p + (1 - p) rho^j,   p = ArModel.passes(),  rho = phi (1 - K)  (K: the filter's gain)

(1 at the onset, fading geometrically to ``p`` as the filter takes part of the shift for
wander), while a one-step spike ``s`` leaves ``s`` and then ``-phi K s``: it is reversed, a
shift is not. The CUSUMs of ``detect.py`` weigh every step alike, so under phi ~0.95 they see
a shift at full size for a few steps and then at ``p`` (~0.2) of it: a +5 % GPU was found
after ~60 steps. The matched filter of the signature is the most powerful test of a shift
from a known onset (Neyman-Pearson):

    T(t0, t) = sum_j g_j x_{t0+j} / sqrt(sum_j g_j^2),   x = clip(z, +-CLIP),

standard normal under no change (independent innovations; clipping only shrinks them). The
onset is Page's: the excursion restarts where the log-likelihood ratio of a shift of
``DELTA`` noise units, ``DELTA sum g x - DELTA^2 / 2 sum g^2``, is <= 0 (shifts of at least
``DELTA / 2`` keep it open), or after ``WINDOW`` steps. The alarm is ``T > c`` with ``c`` from a
Bonferroni bound over the ``WINDOW`` onsets an excursion can have had: ``P(T > c) = budget /
(2 WINDOW)`` (half for Gaussian noise, half for spikes: ``CLIP`` 3.5 needs five spikes in
a row). The test runs only when the model has an AR part (with white noise ``g = 1`` and it is
the slow CUSUM's weaker twin), on half the slow test's budget (``calib.shift_designs``).
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from minutiae.analyses.stragglers.armodel import ArModel

#: innovations are clipped here (a GC pause or a checkpoint adds at most this)
CLIP = 3.5
#: the shift (innovation sigmas) whose log-likelihood ratio keeps an excursion open
DELTA = 2.0
#: an excursion lasts at most this many tested steps (the Bonferroni count of onsets)
WINDOW = 100

__all__ = ["CLIP", "DELTA", "WINDOW", "ShiftTest", "threshold", "upcross"]


@lru_cache(maxsize=1024)
def threshold(alpha: float, model: ArModel | None = None) -> float:
    """``c`` for the test's share ``alpha`` per rank and step, half of it for Gaussian noise:
    Bonferroni over the onsets of a window, ``P(N(0, 1) > c) = alpha / (2 WINDOW)``; with
    ``model``, the smaller ``c`` of the up-crossing bound for its signature (``upcross``)."""
    bonferroni = -NormalDist().inv_cdf(alpha / (2.0 * WINDOW))
    if model is None or model.white:
        return bonferroni
    p, rho = signature(model)
    return min(bonferroni, _upcross_c(alpha / 2.0, round(p / SIG_GRID) * SIG_GRID,
                                      round(rho / SIG_GRID) * SIG_GRID, bonferroni))


#: the signature is rounded to this for the up-crossing threshold (its cache: ``c`` moves by
#: ~0.1 between phi 0.9 and 0.99, by < 0.003 within a step of this)
SIG_GRID = 0.01


def _norm_sf(x: np.ndarray) -> np.ndarray:
    """``P(N(0, 1) > x)`` elementwise (the Chebyshev fit of erfc, relative error < 1.2e-7:
    Press et al., Numerical Recipes, 2nd ed., 6.2)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    erfc = t * np.exp(-z * z + poly)
    out: np.ndarray = 0.5 * np.where(x >= 0, erfc, 2.0 - erfc)
    return out


def upcross(c: float, p: float, rho: float) -> float:
    """An upper bound on the chance per rank and step that the test alarms under Gaussian
    innovations with no shift (signature ``p``, ``rho``). An alarm at step t is an
    up-crossing: the open excursion's statistic, from an onset among the last ``WINDOW``
    steps, is above ``c`` at t and was not at t - 1 (the rank was still waiting). So the
    chance is at most the sum over the window's ages m of ``P(T_{m-1} <= c < T_m)``, with
    ``T_m = (sqrt(G_{m-1}) T_{m-1} + g_{m-1} x) / sqrt(G_m)`` (``G``: running sum of g^2)
    and ``x`` standard normal clipped at ``CLIP``: ``integral over u <= c of phi(u)
    P(x > (c sqrt(G_m) - sqrt(G_{m-1}) u) / g_{m-1})``. Bonferroni counts ``P(T_m > c)``
    for each age; at 5-7 sigmas most of that is excursions already above ``c`` one step
    earlier (a long window's statistic moves little per step), which the waiting rank
    cannot have: the bound is ~1/3 of Bonferroni's under phi 0.95."""
    g = p + (1.0 - p) * rho ** np.arange(WINDOW)
    root = np.sqrt(np.cumsum(g * g))
    v = np.linspace(0.0, 3.0, 301)
    u = c - v                                         # T_{m-1} = u <= c
    phi_u = np.exp(-0.5 * u * u) / math.sqrt(2.0 * math.pi)
    need = (c * root[1:, None] - root[:-1, None] * u[None, :]) / g[1:, None]
    tail = np.zeros(need.shape)
    some = ~(need >= CLIP)  # ~1/10 of the grid: the tail only where it is not 0
    tail[some] = _norm_sf(need[some])
    return float((tail * phi_u[None, :]).sum() * (v[1] - v[0]))


@lru_cache(maxsize=256)
def _upcross_c(share: float, p: float, rho: float, start: float) -> float:
    """``c`` with ``upcross(c) <= share`` less 1 % (for the rounded signature and the
    integral's grid), from the Bonferroni ``c`` (``start``) in one step: the ratio ``K`` of
    the bound to the normal tail grows with ``c`` (e.g. 30.4 at 6.8, 32.3 at 7.36, under phi
    0.95), so ``c`` with ``Q(c) = share / K(start)`` below ``start`` has ``K(c) Q(c) <=
    share``."""
    ratio = upcross(start, p, rho) / max(float(_norm_sf(np.array([start]))[0]), 1e-300)
    if not ratio > 0:
        return start
    return -NormalDist().inv_cdf(min(0.99 * share / ratio, 0.5))


def signature(model: ArModel) -> tuple[float, float]:
    """(p, rho) of the shift signature ``g_j = p + (1 - p) rho^j`` under ``model``."""
    if model.white:
        return 1.0, 0.0
    return model.passes(), model.phi * (1.0 - model.gain())


class ShiftTest:
    """Per rank: the matched-filter statistic of the open excursion, carried between blocks
    (a one-step block and a whole file give the same answer)."""

    def __init__(self, n: int, c: float) -> None:
        self.c = c
        #: the excursion's state, one row each (restarted together): rho^age, steps in it
        #: (its samples: the same sums), sum g x, sum g^2, sum of r
        self.state = np.zeros((5, n))
        self.geo, self.age, self.s, self.g2, self.sum_r = self.state
        self.geo[:] = 1.0
        self.start = np.full(n, -1, dtype=np.int64)

    def run(self, z: np.ndarray, r: np.ndarray, ok: np.ndarray | None, steps: np.ndarray,
            model: ArModel, waiting: np.ndarray,
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Feed a block (``z``: standardised innovations, ``r``: clipped log-ratios; steps,
        ranks). Per rank of ``waiting`` (not yet alarmed): the first block row where
        ``T > c`` (rows: none), the excursion's first step and its (sum r, samples) then, and
        ``T / c`` there (the score)."""
        p, rho = signature(model)
        n_steps, n = z.shape
        first = np.full(n, n_steps, dtype=np.int64)
        since = np.full(n, -1, dtype=np.int64)
        sums = np.zeros((2, n))
        score = np.zeros(n)
        xs = np.minimum(np.maximum(z, -CLIP), CLIP)  # np.clip's values, for the whole block
        pending = waiting.copy()                     # waiting, and no alarm in this block yet
        for t in range(n_steps):
            np.copyto(self.start, steps[t], where=self.age <= 0)
            g = p + (1.0 - p) * self.geo
            if ok is not None:
                g = np.where(ok[t], g, 0.0)
            self.s += g * xs[t]
            self.g2 += g * g
            self.sum_r += r[t]
            inc = 1.0 if ok is None else ok[t]
            stat = self.s / np.sqrt(np.maximum(self.g2, 1e-12))
            hit = pending & (stat > self.c)
            if hit.any():
                pending &= ~hit
                first[hit], since[hit], score[hit] = t, self.start[hit], stat[hit] / self.c
                sums[0, hit], sums[1, hit] = self.sum_r[hit], (self.age + inc)[hit]
            self.geo *= rho
            self.age += inc
            self._restart((DELTA * self.s - 0.5 * DELTA * DELTA * self.g2 <= 0.0)
                          | (self.age >= WINDOW))
        return first, since, sums, score

    def merge(self, z: np.ndarray, r: np.ndarray, ok: np.ndarray | None, steps: np.ndarray,
              model: ArModel, waiting: np.ndarray, first: np.ndarray, which: np.ndarray,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``run``, and where this test alarms before the CUSUMs (block row ``first``), that
        row and ``which`` = 2 set in place."""
        out = self.run(z, r, ok, steps, model, waiting)
        better = out[0] < first
        first[better], which[better] = out[0][better], 2
        return out

    def _restart(self, where: np.ndarray) -> None:
        np.copyto(self.state, _FRESH, where=where[None, :])


#: a restarted excursion's state (``ShiftTest.state``)
_FRESH = np.array([[1.0], [0.0], [0.0], [0.0], [0.0]])

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

from statistics import NormalDist

import numpy as np

from minutiae.analyses.stragglers.armodel import ArModel

#: innovations are clipped here (a GC pause or a checkpoint adds at most this)
CLIP = 3.5
#: the shift (innovation sigmas) whose log-likelihood ratio keeps an excursion open
DELTA = 2.0
#: an excursion lasts at most this many tested steps (the Bonferroni count of onsets)
WINDOW = 100

__all__ = ["CLIP", "DELTA", "WINDOW", "ShiftTest", "threshold"]


def threshold(alpha: float) -> float:
    """``c`` with ``P(N(0, 1) > c) = alpha / (2 WINDOW)``: the test's share ``alpha`` per rank
    and step, half of it for Gaussian noise, over the onsets of a window."""
    return -NormalDist().inv_cdf(alpha / (2.0 * WINDOW))


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
        self.geo = np.ones(n)      # rho^age
        self.age = np.zeros(n)     # steps in the open excursion
        self.s = np.zeros(n)       # sum g x
        self.g2 = np.zeros(n)      # sum g^2
        self.sum_r = np.zeros(n)   # sum of r over the excursion
        self.sum_n = np.zeros(n)
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
        for t in range(n_steps):
            fresh = self.age <= 0
            self.start[fresh] = steps[t]
            g = p + (1.0 - p) * self.geo
            if ok is not None:
                g = np.where(ok[t], g, 0.0)
            x = np.clip(z[t], -CLIP, CLIP)
            self.s += g * x
            self.g2 += g * g
            self.sum_r += r[t]
            self.sum_n += 1.0 if ok is None else ok[t]
            stat = self.s / np.sqrt(np.maximum(self.g2, 1e-12))
            hit = waiting & (first == n_steps) & (stat > self.c)
            if hit.any():
                first[hit], since[hit], score[hit] = t, self.start[hit], stat[hit] / self.c
                sums[0, hit], sums[1, hit] = self.sum_r[hit], self.sum_n[hit]
            self.geo *= rho
            self.age += 1.0 if ok is None else ok[t]
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
        for a, v in ((self.geo, 1.0), (self.age, 0.0), (self.s, 0.0), (self.g2, 0.0),
                     (self.sum_r, 0.0), (self.sum_n, 0.0)):
            a[where] = v

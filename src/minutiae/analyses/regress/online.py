"""Online stage of the regression detector: a one-sided CUSUM on the standardised series (pure).

Why: the change-point search (``regress.detect_series``) segments a whole history and confirms each
cut at p < 0.001, which is right for "when did it change" but needs ~5+ runs after a 2 % shift at
1 % noise. A shift of known size is found fastest by a sequential test (Page's CUSUM is the optimal
detector of a known mean shift, Lorden/Moustakides): for each new run t

    z_t = (y_t − ref) / (σ · sqrt(1 + 1/n_ref))         (clipped at ``clip``)
    g_t = max(0, g_{t−1} + z_t − k)                      alarm when g_t > h

where y = ln(step time), ``ref`` is the robust level of the runs since the last restart that are
not part of the current excursion (runs since g was last 0 are suspects, not reference), σ the
series' robust run-to-run noise from the runs seen so far, and ``k`` = half the shift we want
fastest in σ units (``k`` = 1: a 2 % shift at 1 % noise). The threshold ``h`` is set from the
false-alarm budget: at the shipped h = 3.5 about 4.6 % of 120-run pure-noise series raise a false
alarm, one per ~3,100 monitored runs (``bench/regress/calibrate.py --online``, outlier runs
included). Only slower runs feed the test (a speed-up is left to the change-point search): the
user's question is "is my job slower". σ here is the standard deviation of the successive
differences within 3 MADs (twice as efficient as the MAD on the few runs after a restart), and
a run further out than ``outlier``·σ counts only when the next one is too (a straggler in one
run is not a regression).

Everything is causal: the alarms found on a whole series are exactly those a monitor running after
every new run would have raised, which is how the benchmark counts its false alarms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
SIGMA_FLOOR = 1e-4
#: noise and level are learned from at most this many recent runs (bounded cost on long histories)
MEMORY = 200
SIGMA_EVERY = 5


@dataclass(frozen=True, slots=True)
class OnlineParams:
    """``k``: CUSUM drift (σ units, half the shift to catch fastest); ``h``: alarm threshold;
    ``clip``: a run counts at most this many σ (an outlier run, a straggler in that run, cannot
    raise an alarm alone); ``warmup``: runs needed before the test starts (and after a restart);
    ``min_change``: smallest shift reported (fraction); ``hold``: runs after an alarm during which
    it is reported as a young regression when the change-point search has not confirmed it yet,
    as long as the runs since it are still slower than before at one-sided p < ``alpha``.
    ``max_noise``: the test stands still while the series' noise exceeds this (fraction): a 2 %
    shift is then under 1.3 σ, no test can report it within a few runs (bench/regress/power.py)
    and the alarms it raises late are mostly misplaced; the change-point search alone does better."""

    k: float = 1.0
    h: float = 3.5
    clip: float = 2.5
    outlier: float = 4.0
    warmup: int = 10
    min_change: float = 0.005
    hold: int = 10
    alpha: float = 0.05
    max_noise: float = 0.015


@dataclass(frozen=True, slots=True)
class Alarm:
    """The CUSUM crossed its threshold at run ``raised_at``; ``index``: its estimate of the first
    slower run (the run after the CUSUM last stood at zero). ``change``: exp(mean of runs
    index..raised_at − reference) − 1 (+0.02 = 2 % slower). ``score``: g at the alarm, in σ units
    (h is the threshold); ``sigma``: noise (log units) the test used."""

    index: int
    raised_at: int
    change: float
    score: float
    sigma: float


#: E[Z² | |Z| <= 3] for a standard normal Z: makes the trimmed variance unbiased
_TRIM_VAR = 0.9724


def _sigma(d: F64) -> float:
    """Noise (log units) from successive differences ``d``: the standard deviation of those
    within 3 robust SDs (MAD) of their median, bias-corrected. Shift-robust like the MAD, about
    twice as efficient (which matters on the few runs after a restart), and an outlier run's two
    differences are left out rather than inflating it."""
    if d.size < 2:
        return SIGMA_FLOOR
    c = float(np.median(d))
    s = 1.4826 * float(np.median(np.abs(d - c)))
    if s <= 0.0:
        return SIGMA_FLOOR
    w = d[np.abs(d - c) <= 3.0 * s] - c
    return max(math.sqrt(float(np.mean(w * w)) / _TRIM_VAR / 2.0), SIGMA_FLOOR)


def _reference(x: F64, sigma: float) -> tuple[float, int]:
    """Level of ``x`` robust to outlier runs: the mean of runs within 3σ of the median."""
    med = float(np.median(x))
    keep = x[np.abs(x - med) <= 3.0 * sigma]
    return (float(keep.mean()), int(keep.size)) if keep.size else (med, int(x.size))


def online_alarms(y: F64, p: OnlineParams) -> list[Alarm]:
    """Every alarm a monitor of ``y`` (ln step time, time order) would raise, run by run.

    A mirror CUSUM on faster runs raises nothing (speed-ups are the change-point search's to
    report) but restarts the reference, so that a job that got faster and then slow again is
    judged against its new level."""
    n = int(y.size)
    out: list[Alarm] = []
    if n <= p.warmup:
        return out
    d = np.diff(y)
    start = 0                 # first run of the current segment (after the last restart)
    g = lo = 0.0              # CUSUMs of slower / faster runs
    up_from = lo_from = 0     # each CUSUM last stood at zero just before this run
    far = False               # the previous run was an outlier candidate
    sigma, sigma_at = SIGMA_FLOOR, -SIGMA_EVERY
    ref, n_ref, ref_key = 0.0, 1, (-1, 0.0, -1)
    quiet = math.log1p(p.max_noise)
    for t in range(n):
        if t - start < p.warmup:
            up_from = lo_from = t + 1
            continue
        if t - sigma_at >= SIGMA_EVERY:      # the noise moves slowly: re-estimated every few runs
            sigma, sigma_at = _sigma(d[max(0, t - 1 - MEMORY):t - 1]), t
        if sigma > quiet:
            up_from = lo_from = t + 1
            g = lo = 0.0
            continue
        ref_hi = max(min(up_from, lo_from), start + p.warmup)
        if (start, sigma) != ref_key[:2] or ref_hi - ref_key[2] >= SIGMA_EVERY:
            # the level of >= warmup runs moves slowly too: refreshed every few runs (never
            # with runs of the current excursion)
            ref_key = (start, sigma, ref_hi)
            ref, n_ref = _reference(y[max(start, ref_hi - MEMORY):ref_hi], sigma)
        z = (y[t] - ref) / (sigma * math.sqrt(1.0 + 1.0 / n_ref))
        was_far, far = far, z > p.outlier
        if far and not was_far:
            continue          # one run far out is an outlier (a straggler in that run) until the next is too
        g = max(0.0, g + min(z, p.clip) - p.k)
        lo = max(0.0, lo - max(z, -p.clip) - p.k)
        if g == 0.0:
            up_from = t + 1
        if lo == 0.0:
            lo_from = t + 1
        if g > p.h:
            change = math.expm1(float(np.mean(y[up_from:t + 1])) - ref)
            if change >= p.min_change:
                out.append(Alarm(up_from, t, change, g, sigma))
            start = up_from   # restart: the new level is learned from the suspect runs
        elif lo > p.h:
            start = lo_from
        else:
            continue
        g = lo = 0.0
        up_from = lo_from = t + 1
    return out


def open_alarm(alarms: list[Alarm], n: int, p: OnlineParams) -> Alarm | None:
    """The latest alarm when it is still young (raised within ``hold`` runs of the end)."""
    if alarms and n - 1 - alarms[-1].raised_at < p.hold:
        return alarms[-1]
    return None

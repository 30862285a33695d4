"""Thresholds from a target false-alarm rate, robust noise, and peer-group inference.

Threshold derivation (what ``design`` computes)
-----------------------------------------------
The user states a budget ``F`` of false alarms per 1,000 node-days (default 0.1). A node-day of
a job with step time ``T`` seconds, ``g`` ranks per node and one step in ``N`` logged holds
``86,400 / (N T) x g`` tested rank-steps, so the budget per tested rank-step is
``alpha = F / 1000 x N T / (86,400 g)``, shared equally by the ``D`` detectors run (two per
timing basis): ``alpha_d = alpha / D``.

Each detector is a one-sided CUSUM ``S_t = max(0, S_{t-1} + x_t - k)`` on standardised
log-ratios. The noise model is Gaussian noise of scale sigma plus one-step spikes (GC pauses,
loader hiccups) at a rate p. Half of each detector's budget goes to each:

- *Gaussian part* (the threshold): for i.i.d. N(0, 1) increments Siegmund's approximation gives
  the in-control average run length ``ARL0(h) = (exp(2 k b) - 2 k b - 1) / (2 k^2)`` with
  ``b = h + 1.166``; ``h`` is solved from ``ARL0(h) = 2 / alpha_d``. Winsorising only makes
  increments smaller, so the real ARL0 is at least this. sigma is the warm-up estimate times
  ``sigma_inflation``: the run length is exponential in ``h / sigma^2``, so a noise estimate
  10 % low multiplies the false-alarm rate by ~40; the inflation makes the rate averaged over
  the estimate's error equal to the design's.
- *Spike part* (the clip): the fast detector clips at ``k + h/m``, so no fewer than ``m`` steps
  at the clip can alarm; ``m`` (3 to 6) is the smallest whose spike false-alarm rate (``m``
  spikes within about ``m`` steps, ``spike_false_alarm_rate``) is within the other half of
  ``alpha_d``, with ``p`` the posterior median of the warm-up's spike rate (spikes: ``|z| > 5``;
  ``spike_rate``), so a short warm-up that saw no spike is not taken as proof that there are
  none. ``m = 3`` finds a
  20 % slowdown in 3 steps; a job whose spikes are frequent (0.3 % of rank-steps) needs
  ``m = 4``: three spikes in a row would otherwise be indistinguishable from the first three
  steps of a straggler as slow as a spike, at a rate above the budget. The slow detector clips
  at 3: it needs ``h / 2.5`` spikes within ``~2h`` steps.

Detectors: ``fast`` (k = 1.5, tuned to a 3-sigma shift: 10-20 % slowdowns within a few steps)
and ``slow`` (k = 0.5, tuned to a 1-sigma shift: 2-5 % slowdowns within tens of steps).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np

from minutiae.analyses.stragglers.grid import histogram
from minutiae.analyses.stragglers.specfun import beta_median
from minutiae.analyses.stragglers.types import Design, DetectorDesign

FAST_K = 1.5
SLOW_K = 0.5
SLOW_CLIP = 3.0
NOISE_FLOOR = 0.002  # 0.2 %: below this the data is quantised or synthetic-constant


def siegmund_arl0(k: float, h: float) -> float:
    """In-control average run length of a one-sided CUSUM on N(0,1) with reference ``k``."""
    b = 2.0 * k * (h + 1.166)
    return (math.exp(b) - b - 1.0) / (2.0 * k * k)


def threshold_for(k: float, alpha: float) -> float:
    """The ``h`` whose in-control ARL is ``1 / alpha``: the fixed point of
    ``b = ln(2 k^2 / alpha + 2 k b + 1) / (2 k)`` (a contraction: it converges to machine
    precision in a few steps), then ``h = b - 1.166``; bisection where that is not positive."""
    target = 1.0 / alpha
    b = math.log(2.0 * k * k * target + 1.0) / (2.0 * k)
    for _ in range(60):
        nb = math.log(2.0 * k * k * target + 2.0 * k * b + 1.0) / (2.0 * k)
        if abs(nb - b) <= 1e-13 * max(nb, 1.0):
            b = nb
            break
        b = nb
    h = b - 1.166
    if h > 0 and siegmund_arl0(k, h) > 0:
        return h
    lo, hi = 0.0, 400.0 / k
    for _ in range(64):
        mid = (lo + hi) / 2
        if siegmund_arl0(k, mid) < target:
            lo = mid
        else:
            hi = mid
    return hi


#: the fast test's clip is k + h/m + CLIP_MARGIN: m steps at the clip cross h, m - 1 never do
CLIP_MARGIN = 0.05
#: the fewest / most steps at the clip the fast test may need (3: 20 % found within 3 steps)
MIN_SPIKE_STEPS, MAX_SPIKE_STEPS = 3, 6
#: a one-step spike is a standardised ratio above this in the warm-up
SPIKE_Z = 5.0


def spike_rate(spikes: int, samples: int) -> float:
    """The one-step spike rate the design assumes: the posterior median of p given ``spikes``
    in ``samples`` rank-steps under the Jeffreys prior Beta(1/2, 1/2). With no spike it is
    ~0.23 / samples (the rate at which seeing none is a coin flip), not 0: ``spikes / samples``
    would promise 3-step detection on evidence too thin to exclude spikes. (The posterior mean
    of p^m is dominated by the prior's tail for rare events: a 64-rank job would need 6,000
    clean rank-steps before a 3-step clip, which no warm-up gives.)"""
    if samples <= 0:
        return 0.5
    return beta_median(spikes + 0.5, samples - spikes + 0.5)


def spike_false_alarm_rate(m: int, spikes: int, samples: int) -> float:
    """False alarms per rank-step of the fast test caused by one-step spikes when it needs
    ``m`` steps at its clip: ``m`` spikes in a row, or ``m`` spikes in ``m + j`` steps whose
    ``j`` normal steps each have ``z >= k - m x margin`` (any of the ``m - 1`` gaps), at the
    rate ``spike_rate``; a spike is taken to reach the clip (conservative: GC pauses and loader
    hiccups are tens of sigma)."""
    q = 0.5 * math.erfc((FAST_K - m * CLIP_MARGIN) / math.sqrt(2.0))
    gaps = sum(math.comb(m - 1, j) * q**j for j in range(m))
    return spike_rate(spikes, samples) ** m * gaps


def design(target_per_1000_node_days: float, step_seconds: float, ranks_per_node: int,
           bases: int = 1, spikes: tuple[int, int] | None = None, every: int = 1) -> Design:
    """Thresholds for ``bases`` timing series from the false-alarm budget (module docstring).
    ``spikes`` = (one-step spikes seen, rank-steps looked at) in the warm-up; None: no spike
    model (the fast test needs the minimum, 3 steps at its clip). ``every``: one step in
    ``every`` is logged (and tested), so a test stands for ``every x step_seconds``."""
    if not (target_per_1000_node_days > 0 and step_seconds > 0 and ranks_per_node > 0):
        raise ValueError("false-alarm target, step seconds and ranks per node must be positive")
    alpha = (target_per_1000_node_days / 1000.0 * step_seconds * every
             / (86_400.0 * ranks_per_node))
    per = alpha / (2 * bases)
    # half of each test's budget for Gaussian noise (the threshold), half for spikes (the clip)
    h_fast = threshold_for(FAST_K, per / 2)
    h_slow = threshold_for(SLOW_K, per / 2)
    m = MIN_SPIKE_STEPS
    while (spikes is not None and m < MAX_SPIKE_STEPS
           and spike_false_alarm_rate(m, *spikes) > per / 2):
        m += 1
    detectors = (
        DetectorDesign("fast", FAST_K, h_fast, FAST_K + h_fast / m + CLIP_MARGIN, per, m),
        DetectorDesign("slow", SLOW_K, h_slow, SLOW_CLIP, per, 0),
    )
    return Design(target_per_1000_node_days, step_seconds, ranks_per_node, alpha, detectors, every)


#: values of standardised innovations needed before their tail is trusted over the Gaussian's
MIN_TAIL_VALUES = 500
#: the grid the increments' MGF is taken on (a bin is ~0.002 sigma wide)
TAIL_BINS = 4096
_Q_X = np.linspace(-12.0, 12.0, 4801)
_Q_W = np.exp(-_Q_X ** 2 / 2) / np.exp(-_Q_X ** 2 / 2).sum()


#: the root's bracket: none below ROOT_MAX is reported as 0, one below ROOT_MIN as ROOT_MIN
ROOT_MIN, ROOT_MAX = 1e-6, 50.0


def _root(p: np.ndarray, x: np.ndarray) -> float:
    """The positive root of ``M(t) = sum(p exp(t x)) = 1`` (the Cramer-Lundberg exponent of
    increments ``x`` of probabilities ``p`` and negative mean); 0 when there is none below
    ``ROOT_MAX``, ``ROOT_MIN`` when it is below that. Newton's method on ``log M`` (convex, 0
    at 0; nearly linear right of the root) inside a bracket: right of the root its steps fall
    monotonically onto it, left of it a step lands right of it, left of M's minimum the point
    doubles. 4-7 evaluations of M instead of a 60-step bisection, the same root to 1e-13
    (tests/analyses/stragglers/test_calib_root.py compares the two on a grid)."""
    x = np.asarray(x, dtype=np.float64)  # on a float32 grid M moves in steps: no convergence
    px = p * x
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # inf: far above it
        if not float(np.dot(p, np.exp(ROOT_MAX * x))) >= 1.0:
            return 0.0
        if float(np.dot(p, np.exp(ROOT_MIN * x))) >= 1.0:
            return ROOT_MIN
        lo, hi = ROOT_MIN, ROOT_MAX
        mean = float(np.sum(px))
        var = float(np.dot(px, x)) - mean * mean
        t = -2.0 * mean / var if var > 0 else 1.0  # the exponent of a Gaussian (2 mu / var)
        e, e64 = np.empty_like(x), np.empty(x.shape)  # exp(t x) in x's precision, and as p's
        for _ in range(200):
            if not lo < t < hi:
                t = (lo + hi) / 2
            np.copyto(e64, np.exp(np.multiply(x, t, out=e), out=e))
            m, slope = float(np.dot(p, e64)), float(np.dot(px, e64))
            lo, hi = (t, hi) if m < 1.0 else (lo, t)
            if not slope > 0:  # left of the minimum: the root is further right
                t = min(2.0 * t, hi)
                continue
            step = m * math.log(m) / slope if m > 0 and math.isfinite(m) else math.nan
            if abs(step) <= 1e-12 * t:
                return t - step
            if hi - lo <= 1e-15 * hi:
                return hi
            t = t - step
    return hi


@functools.lru_cache(maxsize=256)
def gaussian_exponent(k: float, clip: float) -> float:
    """The exponent of a CUSUM (k, clip) on N(0, 1) increments (2k without the clip)."""
    return _root(_Q_W, np.clip(_Q_X, -clip, clip) - k)


def tail_threshold(d: DetectorDesign, z: np.ndarray) -> float:
    """``d.h``, or more when the standardised innovations ``z`` (a sample of the test's own
    values) have heavier tails than the Gaussian the design assumes (Student-t per-rank noise).

    For i.i.d. increments ``x = clip(z) - k`` with mean ``-mu`` the CUSUM's in-control run
    length is governed by the exponent ``theta``, the positive root of ``E[exp(theta x)] = 1``
    (Cramer-Lundberg; Siegmund's formula is the Gaussian case, ``theta = 2k``, ``mu = k``):
    ``ARL0 ~ (exp(theta b) - theta b - 1) / (theta mu)``, ``b = h + 1.166``. ``theta`` is
    estimated from ``z`` within ``SPIKE_Z`` (one-step spikes beyond it are the other half of the
    budget: ``spike_false_alarm_rate``); when it is below the Gaussian's (for the same clip) by more than two
    standard errors, ``h`` is solved from that formula at the test's budget with the estimate
    plus two standard errors; otherwise the Gaussian design stands (a sample never lowers a
    threshold, and sampling noise in a Gaussian sample does not raise one)."""
    z = z[np.abs(z) <= SPIKE_Z]  # (NaN compares False) spikes are the spike model's half
    if z.size < MIN_TAIL_VALUES:
        return d.h
    # the clipped increments on a fine grid (their MGF is then a short dot product)
    counts, centres = histogram(np.clip(z, -d.clip, d.clip), -d.clip, d.clip, TAIL_BINS)
    seen = counts > 0
    p, x = counts[seen] / z.size, (centres - d.k)[seen]
    mu = -float(np.dot(p, x))
    with np.errstate(over="ignore"):  # M(G) < 1: the root is above G (log M is convex, 0 at 0)
        if float(np.dot(p, np.exp(gaussian_exponent(d.k, d.clip) * x))) < 1.0 - 1e-6:
            return d.h  # so is theta + 2 se: the design stands (one M, not _root's 6-200)
    theta = _root(p, x)
    if not (mu > 0 and theta > 0):
        return d.h
    # the estimate's standard error (delta method on the empirical MGF): only tails heavier
    # than the Gaussian's beyond two standard errors move the threshold, by what they show
    with np.errstate(over="ignore"):
        e = np.exp(theta * x)
    sd = math.sqrt(max(float(np.dot(p, e * e)) - float(np.dot(p, e)) ** 2, 0.0))
    se = sd / math.sqrt(z.size) / max(abs(float(np.dot(p, x * e))), 1e-12)
    theta = theta + 2.0 * se
    if not theta < gaussian_exponent(d.k, d.clip):
        return d.h
    target = 2.0 / d.alpha  # the Gaussian half of the test's share, as ``design``

    def arl(h: float) -> float:
        b = theta * (h + 1.166)
        return (math.expm1(b) - b) / (theta * mu)

    lo, hi = d.h, d.h
    while arl(hi) < target and hi < 1e4:
        hi *= 2.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if arl(mid) < target else (lo, mid)
    return hi


def tail_design(d: DetectorDesign, z: np.ndarray) -> DetectorDesign:
    """``d`` with its threshold raised for the tails of ``z`` (``tail_threshold``). The clip
    stays (a higher clip would let more of the tail in); a test set by its clip then needs
    more steps at it (``steps_at_clip``): heavy tails cost large slowdowns a few steps."""
    h = tail_threshold(d, z)
    if h <= d.h:
        return d
    m = math.ceil(h / (d.clip - d.k) - 1e-9) if d.steps_at_clip else 0
    return replace(d, h=h, steps_at_clip=m)


def robust_sigma(values: np.ndarray) -> float:
    """1.4826 x median absolute deviation of the finite values (a Gaussian's sigma)."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return float("nan")
    return float(1.4826 * np.median(np.abs(v - np.median(v))))


#: variance of a standard normal truncated to +-3 (the trimmed estimate's correction)
_TRUNC3 = 1.0 - 2 * 3.0 * math.exp(-4.5) / math.sqrt(2 * math.pi) / math.erf(3.0 / math.sqrt(2.0))


def noise_sigma(values: np.ndarray) -> tuple[float, int]:
    """The noise of ``values`` and how many values it rests on: the standard deviation of the
    values within 3 robust sigmas of the median (spikes excluded), corrected for the
    truncation. ~95 % efficient for Gaussian noise (the MAD alone is 37 %: with the few hundred
    warm-up values of a small group its error is what set the false-alarm rate)."""
    v = np.sort(values, axis=None)  # NaN sorts last; a sort beats np.median's overhead here
    n = int(np.count_nonzero(np.isfinite(v)))
    if n == 0:
        return float("nan"), 0
    v = v[:n]
    c = float(v[(n - 1) // 2] + v[n // 2]) / 2.0
    dev = np.abs(v - c)
    d = np.sort(dev)
    s0 = 1.4826 * float(d[(n - 1) // 2] + d[n // 2]) / 2.0
    if not s0 > 0:
        return s0, n
    inner = dev[dev <= 3.0 * s0]
    if inner.size < 2:
        return s0, n
    return float(np.sqrt(np.dot(inner, inner) / inner.size / _TRUNC3)), n


#: relative standard error of ``noise_sigma`` from n Gaussian values is NOISE_SE / sqrt(n)
NOISE_SE = 0.72
_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(48)
_GH_W = _GH_W / _GH_W.sum()


def _mean_rate(k: float, h: float, rho: np.ndarray) -> float:
    """E[1 / ARL0] when the real noise is ``sigma_design / rho`` (a CUSUM (k, h) on z scaled by
    rho is the CUSUM (k rho, h rho) on standard increments; Siegmund's formula, vectorised)."""
    kr = k * rho
    b = 2.0 * kr * (h * rho + 1.166)
    with np.errstate(over="ignore"):
        arl = (np.expm1(b) - b) / (2.0 * kr * kr)
    return float(np.dot(_GH_W, 1.0 / arl))


def sigma_inflation(n: int, detectors: tuple[DetectorDesign, ...]) -> float:
    """The factor ``1 + c`` the warm-up noise estimate is multiplied by so that each test's
    false-alarm rate, averaged over the estimate's own error (relative standard error
    ``NOISE_SE / sqrt(n)``, Gaussian), is no more than its design rate. The run length is
    exponential in ``h / sigma^2``: an estimate 10 % low multiplies the rate by ~40 while one
    10 % high divides it by less, so the average needs the margin (c ~ ln(1 / alpha) x
    se^2: 6 % with 160 warm-up values, 0.1 % with 20,000)."""
    # h to 0.05 (the factor moves by < 1e-3 over that), so jobs share cached answers
    return _inflation(n, tuple((d.k, round(d.h * 20) / 20) for d in detectors))


@functools.lru_cache(maxsize=4096)
def _inflation(n: int, tests: tuple[tuple[float, float], ...]) -> float:
    if n <= 1:
        return 1.0
    se = NOISE_SE / math.sqrt(n)
    ratio = np.maximum(1.0 + se * _GH_X, 0.3)  # sigma_hat / sigma at the quadrature nodes

    def ok(c: float) -> bool:
        return all(_mean_rate(k, h, (1.0 + c) * ratio) <= 1.0 / siegmund_arl0(k, h)
                   for k, h in tests)

    if ok(0.0):
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(24):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return 1.0 + hi


MIN_INFERRED_GROUP = 8


def _divisors(n: int, top: int) -> list[int]:
    return [p for p in range(2, min(top, n // MIN_INFERRED_GROUP) + 1) if n % p == 0]


#: the share of the largest deviations a grouping's score ignores (a slow node of a large job)
TRIM = 0.05


def _score(dev: np.ndarray) -> float:
    """Mean absolute deviation without the largest ``TRIM`` share. A mean, not a median: a
    minority of offset stages (only the first and last of 8 heavier: 25 % of the ranks) moves
    it, while the median deviation of a job whose 6 middle stages are equal ignores them."""
    d = np.sort(np.abs(dev), axis=None)
    keep = max(1, int(round(d.size * (1.0 - TRIM))))
    return float(d[:keep].mean())


def infer_groups(levels: np.ndarray, max_groups: int = 512,
                 ranks_per_node: int | None = None) -> tuple[np.ndarray, str]:
    """Peer groups from the ranks' typical time when no stage/role is given.

    ``levels`` is each rank's median log step time relative to the job (ordered by rank id).
    Pipeline stages put ranks in contiguous blocks (Megatron's ``tp-cp-ep-dp-pp`` and
    torchtitan's ``pp, dp, cp, tp`` orders: PP outermost) or stride them; for every group count
    ``P`` dividing the rank count, both layouts are scored by the trimmed mean absolute
    deviation of ranks from their group median (``_score``: the largest 5 % are ignored, so a
    slow node of a large job never forms a "stage"; groups hold at least 8 ranks and the score
    is corrected for the shrinkage of deviations around a small group's own median,
    ~1 - 1.2/m). With ``ranks_per_node`` known a group spans at least two nodes: a group that is
    one node would be indistinguishable from a node slow since step 0, which must stay
    visible (a pipeline stage of one node needs ``--layout`` or a stage column). The fewest
    groups within 25 % of the best score win, if they at least halve the single-group score;
    otherwise everyone is one group.
    """
    n = levels.size
    lv = np.where(np.isfinite(levels), levels, np.nanmedian(levels) if n else 0.0)
    one = _score(lv - np.median(lv)) if n else 0.0
    top = max_groups if not ranks_per_node else min(max_groups, n // (2 * ranks_per_node))
    scored: list[tuple[float, int, str]] = []
    for p in _divisors(n, top):
        shrink = 1.0 - 1.2 / (n // p)  # deviations from a sample median of m values shrink so
        blocks = lv.reshape(p, n // p)
        c_cost = _score(blocks - np.median(blocks, axis=1, keepdims=True))
        strided = lv.reshape(n // p, p)
        s_cost = _score(strided - np.median(strided, axis=0, keepdims=True))
        c_cost, s_cost = c_cost / shrink, s_cost / shrink
        scored += [(c_cost, p, "contiguous"), (s_cost, p, "strided")]
    if not scored:
        return np.zeros(n, dtype=np.int64), "one group (too few ranks to infer stages)"
    best = min(c for c, _, _ in scored)
    if not best < 0.5 * one:
        return np.zeros(n, dtype=np.int64), "one group (no stage structure in the timings)"
    cost, p, layout = min((s for s in scored if s[0] <= 1.25 * best), key=lambda s: (s[1], s[0]))
    idx = np.arange(n)
    groups = idx // (n // p) if layout == "contiguous" else idx % p
    return groups.astype(np.int64), f"inferred: {p} {layout} stage groups"

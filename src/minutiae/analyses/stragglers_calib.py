"""Thresholds from a target false-alarm rate, robust noise, and peer-group inference.

Threshold derivation (what ``design`` computes)
-----------------------------------------------
The user states a budget ``F`` of false alarms per 1,000 node-days (default 0.1). A node-day of
a job with step time ``T`` seconds and ``g`` ranks per node holds ``86,400 / T x g`` rank-steps,
so the budget per rank and step is ``alpha = F / 1000 x T / (86,400 g)``, shared equally by the
``D`` detectors run (two per timing basis): ``alpha_d = alpha / D``.

Each detector is a one-sided CUSUM ``S_t = max(0, S_{t-1} + x_t - k)`` on standardised
log-ratios. For i.i.d. N(0, 1) increments Siegmund's approximation gives the in-control average
run length ``ARL0(h) = (exp(2 k b) - 2 k b - 1) / (2 k^2)`` with ``b = h + 1.166``; ``h`` is solved
from ``ARL0(h) = 1 / alpha_d``, so a healthy rank crosses it once per ``1 / alpha_d`` steps.
Winsorising ``x`` (``clip``) only makes increments stochastically smaller, so the real ARL0 is
at least this (the bound is conservative). Heavy tails (GC pauses, loader hiccups: one-step
spikes, rate ``p`` per rank-step) are handled by construction: the fast detector clips at
``k + h/3``, so no fewer than three steps at the clip can alarm; after a spike its statistic
decays by ``k`` per normal step, so a false alarm needs three spikes within about four steps
(rate ~``4 p^3``). The slow detector clips at 3: it needs ``h / 2.5`` spikes within ``~2h``
steps. ``spike_false_alarm_rate`` reports the fast term so that a job whose measured spike rate
breaks the budget is told so (the rate is measured in the warm-up window: ``|z| > 5``).

Detectors: ``fast`` (k = 1.5, tuned to a 3-sigma shift: 10-20 % slowdowns within a few steps)
and ``slow`` (k = 0.5, tuned to a 1-sigma shift: 2-5 % slowdowns within tens of steps).
"""

from __future__ import annotations

import math

import numpy as np

from minutiae.analyses.stragglers_types import Design, DetectorDesign

FAST_K = 1.5
SLOW_K = 0.5
SLOW_CLIP = 3.0
NOISE_FLOOR = 0.002  # 0.2 %: below this the data is quantised or synthetic-constant


def siegmund_arl0(k: float, h: float) -> float:
    """In-control average run length of a one-sided CUSUM on N(0,1) with reference ``k``."""
    b = 2.0 * k * (h + 1.166)
    return (math.exp(b) - b - 1.0) / (2.0 * k * k)


def threshold_for(k: float, alpha: float) -> float:
    """The ``h`` whose in-control ARL is ``1 / alpha`` (bisection; ARL0 grows with ``h``)."""
    target = 1.0 / alpha
    lo, hi = 0.0, 400.0 / k
    for _ in range(200):
        mid = (lo + hi) / 2
        if siegmund_arl0(k, mid) < target:
            lo = mid
        else:
            hi = mid
    return hi


def design(target_per_1000_node_days: float, step_seconds: float, ranks_per_node: int,
           bases: int = 1) -> Design:
    """Thresholds for ``bases`` timing series from the false-alarm budget (module docstring)."""
    if not (target_per_1000_node_days > 0 and step_seconds > 0 and ranks_per_node > 0):
        raise ValueError("false-alarm target, step seconds and ranks per node must be positive")
    alpha = target_per_1000_node_days / 1000.0 * step_seconds / (86_400.0 * ranks_per_node)
    per = alpha / (2 * bases)
    h_fast = threshold_for(FAST_K, per)
    h_slow = threshold_for(SLOW_K, per)
    detectors = (
        DetectorDesign("fast", FAST_K, h_fast, FAST_K + h_fast / 3 + 0.05, per),
        DetectorDesign("slow", SLOW_K, h_slow, SLOW_CLIP, per),
    )
    return Design(target_per_1000_node_days, step_seconds, ranks_per_node, alpha, detectors)


def spike_false_alarm_rate(spike_rate: float) -> float:
    """Per rank-step false alarms caused by one-step spikes at ``spike_rate`` (fast detector:
    three spikes within four steps; the slow detector's share is negligible)."""
    return 4.0 * spike_rate**3


def robust_sigma(values: np.ndarray) -> float:
    """1.4826 x median absolute deviation of the finite values (a Gaussian's sigma)."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return float("nan")
    return float(1.4826 * np.median(np.abs(v - np.median(v))))


MIN_INFERRED_GROUP = 8


def _divisors(n: int, top: int) -> list[int]:
    return [p for p in range(2, min(top, n // MIN_INFERRED_GROUP) + 1) if n % p == 0]


def infer_groups(levels: np.ndarray, max_groups: int = 512) -> tuple[np.ndarray, str]:
    """Peer groups from the ranks' typical time when no stage/role is given.

    ``levels`` is each rank's median log step time relative to the job (ordered by rank id).
    Pipeline stages put ranks in contiguous blocks (Megatron's default order) or stride them;
    for every group count ``P`` dividing the rank count, both layouts are scored by the median
    absolute deviation of ranks from their group median (a median ignores a few slow ranks, so a
    slow node never forms a "stage"; groups hold at least 8 ranks and the score is corrected for
    the shrinkage of deviations around a small group's own median, ~1 - 1.2/m). The fewest groups within 25 % of the best score win, if they at
    least halve the single-group score; otherwise everyone is one group.
    """
    n = levels.size
    lv = np.where(np.isfinite(levels), levels, np.nanmedian(levels) if n else 0.0)
    one = float(np.median(np.abs(lv - np.median(lv)))) if n else 0.0
    scored: list[tuple[float, int, str]] = []
    for p in _divisors(n, max_groups):
        shrink = 1.0 - 1.2 / (n // p)  # deviations from a sample median of m values shrink so
        blocks = lv.reshape(p, n // p)
        c_cost = float(np.median(np.abs(blocks - np.median(blocks, axis=1, keepdims=True))))
        strided = lv.reshape(n // p, p)
        s_cost = float(np.median(np.abs(strided - np.median(strided, axis=0, keepdims=True))))
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

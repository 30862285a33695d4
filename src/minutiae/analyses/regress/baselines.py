"""Published baselines the benchmark runs beside our detector, on the same series.

- :func:`edivisive`: E-Divisive with means (Matteson & James 2014, α = 1) with a permutation test,
  the method MongoDB published for its CI performance data (Daly et al., ICPE 2020; their
  signal-processing-algorithms defaults: p ≤ 0.05, 100 permutations). Hierarchical: the best new cut
  over all current segments is tested by permuting that segment; stop at the first insignificant one.
- :func:`mozilla_ttest`: Mozilla Perfherder's rule: at each run, Welch-style t between a back window
  (≥ 12, ≤ 24 runs) and a fore window of 12, linearly weighted means; alert where t > 7 and t is a
  local maximum, once 12 runs are available on both sides.

Both return the indices of the first run after each change (compact re-implementations in numpy).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


def _q_all(x: F64, min_size: int) -> tuple[int, float]:
    """argmax over τ of the E-Divisive statistic Q(τ) for segment ``x``."""
    n = x.size
    if n < 2 * min_size:
        return -1, -np.inf
    d = np.abs(x[:, None] - x[None, :])
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    tau = np.arange(min_size, n - min_size + 1)
    m = tau.astype(float)
    k = n - m
    between = p[tau, n] - p[tau, tau]
    wl = p[tau, tau] / 2.0
    wr = (p[n, n] - 2.0 * p[tau, n] + p[tau, tau]) / 2.0
    q = (m * k / n) * (2.0 * between / (m * k) - wl / (m * (m - 1) / 2.0) - wr / (k * (k - 1) / 2.0))
    j = int(np.argmax(q))
    return int(tau[j]), float(q[j])


def edivisive(y: F64, rng: np.random.Generator, pvalue: float = 0.05, permutations: int = 100,
              min_size: int = 3) -> list[int]:
    cuts: list[int] = []
    while True:
        bounds = [0, *sorted(cuts), y.size]
        best = (-np.inf, -1, 0, 0)
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            tau, q = _q_all(y[a:b], min_size)
            if tau > 0 and q > best[0]:
                best = (q, a + tau, a, b)
        q, cut, a, b = best
        if cut < 0:
            return sorted(cuts)
        seg = y[a:b].copy()
        exceed = 0
        for _ in range(permutations):
            rng.shuffle(seg)
            if _q_all(seg, min_size)[1] >= q:
                exceed += 1
        if (exceed + 1) / (permutations + 1) > pvalue:
            return sorted(cuts)
        cuts.append(cut)


def _weighted(w: F64) -> tuple[float, float, int]:
    n = w.size
    weights = (n - np.arange(n)) / n       # nearest run weighs most
    avg = float((w * weights).sum() / weights.sum())
    var = float(((w - avg) ** 2).sum() / (n - 1)) if n > 1 else 0.0
    return avg, var, n


def mozilla_ttest(y: F64, min_back: int = 12, max_back: int = 24, fore: int = 12,
                  t_threshold: float = 7.0) -> list[int]:
    n = y.size
    t = np.zeros(n)
    prev_n = np.zeros(n, int)
    next_n = np.zeros(n, int)
    last_seen = 0
    for i in range(1, n):
        back = min(max(last_seen, min_back), max_back)
        jw = y[max(0, i - back):i][::-1]
        kw = y[i:i + fore]
        prev_n[i], next_n[i] = jw.size, kw.size
        if jw.size and kw.size:
            a1, v1, n1 = _weighted(jw)
            a2, v2, n2 = _weighted(kw)
            delta = a2 - a1
            if delta == 0:
                t[i] = 0.0
            elif v1 == 0 and v2 == 0:
                t[i] = np.inf
            else:
                t[i] = abs(delta / np.sqrt(v1 / n1 + v2 / n2))
        last_seen = 0 if t[i] > t_threshold else last_seen + 1
    out = []
    for i in range(1, n):
        if prev_n[i] < min_back or next_n[i] < fore or t[i] <= t_threshold:
            continue
        if t[i - 1] > t[i] or (i + 1 < n and t[i + 1] > t[i]):
            continue
        out.append(i)
    return out

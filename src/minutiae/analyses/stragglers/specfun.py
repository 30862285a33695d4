"""The two special-function values the straggler designs need, in plain Python: importing
``scipy.special`` cost 0.35-1 s of every ``minutiae stragglers`` run (its array-API layer walks
numpy's namespace) for two scalar calls. Both agree with scipy to ~1e-12 (tests/analyses/
stragglers/test_specfun.py compares them over a grid)."""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = ["beta_cdf", "beta_median", "normal_quantile"]

_STD_NORMAL = NormalDist()
_TINY = 1e-300
_EPS = 1e-15


def normal_quantile(p: float) -> float:
    """The standard normal quantile (``scipy.special.ndtri``): ±inf at 0 and 1."""
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return _STD_NORMAL.inv_cdf(p)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz),
    convergent for ``x < (a + 1) / (a + b + 2)``."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 100_000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + num / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


_STIRLING = (1.0 / 12.0, -1.0 / 360.0, 1.0 / 1260.0, -1.0 / 1680.0)


def _stirling_tail(z: float) -> float:
    return sum(c / z ** (2 * i + 1) for i, c in enumerate(_STIRLING))


def _lgamma_rise(b: float, a: float) -> float:
    """lgamma(b + a) - lgamma(b) for b >= 100 without the cancellation of two huge lgammas
    (Stirling's series; the first omitted term is below 1e-20)."""
    return ((b - 0.5) * math.log1p(a / b) + a * math.log(b + a) - a
            + _stirling_tail(b + a) - _stirling_tail(b))


def _log_beta(a: float, b: float) -> float:
    if a > b:
        a, b = b, a
    if b >= 100.0:
        return math.lgamma(a) - _lgamma_rise(b, a)
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def beta_median(a: float, b: float) -> float:
    """The median of Beta(a, b) (``scipy.special.betaincinv(a, b, 0.5)``), a, b > 0: Newton
    steps from the closed-form approximation, kept inside a bisection bracket."""
    lo, hi = 0.0, 1.0
    x = min(max((a - 1.0 / 3.0) / (a + b - 2.0 / 3.0), 1e-12), 1.0 - 1e-12)
    log_norm = _log_beta(a, b)
    for _ in range(200):
        f = beta_cdf(x, a, b) - 0.5
        if f > 0:
            hi = x
        else:
            lo = x
        dens = math.exp((a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x) - log_norm)
        step = f / dens if dens > 0 else math.inf
        nxt = x - step
        if not lo < nxt < hi:
            nxt = (lo + hi) / 2.0
        if abs(nxt - x) <= 1e-15 * max(x, 1e-300) or hi - lo <= 1e-300:
            return nxt
        x = nxt
    return x

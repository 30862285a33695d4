"""``calib._root`` (safeguarded Newton on log M) finds the Cramer-Lundberg exponent the 60-step
bisection it replaced found, to 1e-13 relative, on a grid of increment distributions: Student-t
of 1.5 to 1,000 degrees of freedom at several scales, clips and reference values, and the
Gaussian quadrature ``gaussian_exponent`` uses (whose root is 2k without a clip)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from minutiae.analyses.stragglers.calib import (
    ROOT_MAX,
    ROOT_MIN,
    TAIL_BINS,
    _root,
    gaussian_exponent,
)


def _bisection(f: Callable[[float], float]) -> float:
    """The replaced reference: 60 halvings of [ROOT_MIN, ROOT_MAX] (0 when f(ROOT_MAX) < 0)."""
    lo, hi = ROOT_MIN, ROOT_MAX
    with np.errstate(over="ignore", invalid="ignore"):
        if f(hi) < 0:
            return 0.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return lo


def _increments(dof: float, scale: float, k: float, clip: float, n: int,
                seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(p, x) as ``tail_threshold`` builds them: a histogram of the clipped sample, minus k."""
    z = np.random.default_rng(seed).standard_t(dof, n) * scale
    counts, edges = np.histogram(np.clip(z, -clip, clip), bins=TAIL_BINS, range=(-clip, clip))
    seen = counts > 0
    return counts[seen] / n, ((edges[:-1] + edges[1:]) / 2 - k)[seen]


@pytest.mark.parametrize("dof", [1.5, 2.0, 3.0, 5.0, 10.0, 1000.0])
@pytest.mark.parametrize("scale", [0.3, 0.7, 1.0, 1.5, 3.0])
@pytest.mark.parametrize(("k", "clip"), [(1.5, 2.0), (1.5, 3.6), (1.5, 6.0), (0.5, 3.0), (0.5, 8.0)])
def test_newton_root_is_the_bisection_root(dof: float, scale: float, k: float, clip: float) -> None:
    p, x = _increments(dof, scale, k, clip, 5000, seed=int(dof * 10 + scale * 100))
    want = _bisection(lambda t: float(np.dot(p, np.exp(t * x))) - 1.0)
    got = _root(p, x)
    if want == 0.0:
        assert got == 0.0
    else:
        assert got == pytest.approx(want, rel=1e-13, abs=0)
        assert float(np.dot(p, np.exp(got * x))) == pytest.approx(1.0, abs=1e-12)


def test_no_root_below_the_bracket_and_degenerate_increments() -> None:
    p = np.array([0.5, 0.5])
    assert _root(p, np.array([-1.0, -0.5])) == 0.0        # never positive: M falls forever
    assert _root(p, np.array([-1.0, 0.001])) == 0.0       # the root is far above ROOT_MAX
    assert _root(p, np.array([-1e-9, 1.0])) == ROOT_MIN   # mean ~ +0.5: M rises from 0 on


@pytest.mark.parametrize(("k", "clip"), [(1.5, 3.6), (1.5, 4.2), (0.5, 3.0), (1.5, 12.0), (0.5, 12.0)])
def test_gaussian_exponent(k: float, clip: float) -> None:
    from minutiae.analyses.stragglers import calib

    x = np.clip(calib._Q_X, -clip, clip) - k
    want = _bisection(lambda t: float(np.dot(calib._Q_W, np.exp(t * x))) - 1.0)
    assert gaussian_exponent(k, clip) == pytest.approx(want, rel=1e-13)
    if clip >= 12.0:  # no clip: the N(0, 1) exponent is 2k exactly
        assert gaussian_exponent(k, clip) == pytest.approx(2 * k, rel=1e-6)
    assert not math.isnan(gaussian_exponent(k, clip))

"""The upper confidence bound on a small job's GPU spread (``floor.spread_bound``, issue 13)."""

from __future__ import annotations

import numpy as np
import pytest

from minutiae.analyses.stragglers.floor import SPREAD_LEVEL, spread_bound


def test_bound_shrinks_towards_one_with_more_gpus() -> None:
    bounds = [spread_bound(n) for n in (8, 16, 32, 64, 256, 1024)]
    assert all(b > 1.0 for b in bounds)
    assert bounds == sorted(bounds, reverse=True)
    assert spread_bound(1024) < 1.1


@pytest.mark.parametrize("units", [16, 32, 128])
def test_bound_covers_the_true_spread_at_its_level(units: int) -> None:
    """1.4826 x MAD of ``units`` normal offsets, times the bound, reaches the true spread in
    about ``SPREAD_LEVEL`` of draws (the chi-square approximation of a MAD: within 3 points)."""
    rng = np.random.default_rng(13)
    x = rng.normal(0.0, 0.012, size=(20_000, units))
    mad = 1.4826 * np.median(np.abs(x - np.median(x, axis=1, keepdims=True)), axis=1)
    covered = float(np.mean(mad * spread_bound(units) >= 0.012))
    assert abs(covered - SPREAD_LEVEL) < 0.03

"""The variogram's block rows (means of consecutive runs of B steps) and what they let the noise
fit tell apart: a persistent GPU-to-GPU offset (the silicon lottery) from slow AR wander."""

from __future__ import annotations

import numpy as np
import pytest
from bench_worlds import worlds

from minutiae.analyses.stragglers.armodel import PHIS, ArModel, design, fit
from minutiae.analyses.stragglers.variogram import (
    BINS,
    BLOCKS,
    LAGS,
    SPIKE_DIFF,
    Moments,
    Variogram,
)

#: AR(1) columns of stationary sd ``sd`` (the independent generator's)
_ar1 = worlds._ar1


def test_block_rows_count_the_differences_of_run_means() -> None:
    """Each block row counts ``|m_k - m_{k-1}|`` on the grid, a run with a missing
    value dropping out, whatever the rows' split into blocks."""
    rng = np.random.default_rng(3)
    z = rng.standard_normal((100, 24)).astype(np.float32)
    z[rng.random(z.shape) < 0.01] = np.nan
    whole, parts = Variogram(np.arange(24)), Variogram(np.arange(24))
    whole.add(z)
    for lo in range(0, 100, 7):
        parts.add(z[lo:lo + 7])
    assert np.array_equal(whole.hist, parts.hist)
    for j, b in enumerate(BLOCKS):
        k = 100 // b
        means = z[:k * b].reshape(k, b, 24).mean(axis=1, dtype=np.float64)
        d = np.abs(np.diff(means, axis=0)).astype(np.float32)
        idx = d.ravel() * np.float32(BINS / SPIKE_DIFF)
        want = np.bincount(idx[np.isfinite(idx) & (idx < BINS)].astype(np.int64), minlength=BINS)
        row = whole.hist[1 + len(LAGS) + j]
        assert np.array_equal(row, want)
        assert 0 < row.sum() < d.size  # the runs with a missing value are gone


@pytest.mark.parametrize(("phi", "a", "w"), [(0.0, 0.0, 1.0), (0.95, 0.5, 0.5), (0.99, 0.3, 0.7)])
def test_design_is_what_the_rows_measure(phi: float, a: float, w: float) -> None:
    """Every row's mean square on simulated AR(1) + white noise is the model's ``cw w + ca a``
    (within 4 standard errors of a chi-square estimate)."""
    rng = np.random.default_rng(5)
    steps, n = 2000, 512
    z = rng.normal(0.0, np.sqrt(w), (steps, n))
    if a:
        z += _ar1(rng, phi, np.sqrt(a), steps, n)
    vg = Variogram(np.arange(n))
    vg.add(z.astype(np.float32))
    m = vg.values()
    assert m.lags.size == len(LAGS) + len(BLOCKS)
    cw, ca = design(m)
    i = int(np.argmin(np.abs(PHIS - phi)))
    want = cw * w + ca[i] * a
    se = want * np.sqrt(2.0 / m.n)
    # dependent differences share values: a generous 6 standard errors
    assert np.all(np.abs(m.v - want) < 6 * se + 0.01 * want), (m.v, want)


def test_design_of_lags_is_the_lag_formula() -> None:
    m = Moments(np.array([1.0, 4.0, 48.0]), np.ones(3), np.ones(3), np.full(3, 100.0), 1.0)
    cw, ca = design(m)
    assert np.array_equal(cw, np.full(3, 2.0))
    assert np.allclose(ca, 2.0 * (1.0 - PHIS[:, None] ** m.lags[None, :]))


def _lottery(seed: int, steps: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = 128
    return (rng.normal(0.0, 0.8, n)[None, :] + rng.normal(0.0, 1.0, (steps, n))).astype(np.float32)


def _passes(z: np.ndarray, blocks: bool) -> float:
    vg = Variogram(np.arange(z.shape[1]))
    vg.add(z)
    m = vg.values()
    if not blocks:
        keep = m.single
        m = Moments(m.lags[keep], m.blocks[keep], m.v[keep], m.n[keep], m.total)
    return fit(m).passes()


def test_a_lottery_is_not_slow_wander_by_the_first_refits() -> None:
    """A lottery (persistent offsets of 0.8 noise sigmas, no wander) over the 84 steps of the
    second refit: the lags alone allow phi 0.99 in every job (the cautious pick keeps under
    a third of a shift); with the block rows several jobs are white again and the others keep
    more of a shift. The same job with real slow wander (phi 0.99, 30 % of the variance) is
    still whitened as much: the block rows do not wash wander out."""
    lag_only = [_passes(_lottery(s, 84), blocks=False) for s in range(10)]
    with_blocks = [_passes(_lottery(s, 84), blocks=True) for s in range(10)]
    assert max(lag_only) < 1 / 3
    assert sum(p == 1.0 for p in with_blocks) >= 4
    assert all(b >= o for b, o in zip(with_blocks, lag_only, strict=True))
    for seed in range(3):
        rng = np.random.default_rng(9 + seed)
        wander = _ar1(rng, 0.99, np.sqrt(0.3), 84, 128) + rng.normal(0, np.sqrt(0.7), (84, 128))
        assert _passes(wander.astype(np.float32), blocks=True) < 0.25
    assert ArModel().passes() == 1.0

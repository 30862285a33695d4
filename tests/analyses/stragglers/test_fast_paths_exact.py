"""The straggler tests' shortcuts give the full computation's values exactly: the level-shift
test's up-crossing bound (the normal tail only where it is not 0), its sample counts (the
excursion's age), and the tail threshold's early exit (the root above the Gaussian's)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from minutiae.analyses.stragglers.armodel import ArModel
from minutiae.analyses.stragglers.calib import (
    SPIKE_Z,
    TAIL_BINS,
    _root,
    gaussian_exponent,
    tail_threshold,
)
from minutiae.analyses.stragglers.grid import histogram
from minutiae.analyses.stragglers.shift import CLIP, WINDOW, ShiftTest, _norm_sf, signature, upcross
from minutiae.analyses.stragglers.types import DetectorDesign
from minutiae.analyses.stragglers.variogram import BINS, LAGS, SPIKE_DIFF, Variogram


def _upcross_full(c: float, p: float, rho: float) -> float:
    g = p + (1.0 - p) * rho ** np.arange(WINDOW)
    root = np.sqrt(np.cumsum(g * g))
    v = np.linspace(0.0, 3.0, 301)
    u = c - v
    phi_u = np.exp(-0.5 * u * u) / math.sqrt(2.0 * math.pi)
    need = (c * root[1:, None] - root[:-1, None] * u[None, :]) / g[1:, None]
    tail = np.where(need >= CLIP, 0.0, _norm_sf(np.minimum(need, CLIP)))
    return float((tail * phi_u[None, :]).sum() * (v[1] - v[0]))


def test_upcross_is_the_full_grid_sum() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        c, p, rho = rng.uniform(2.0, 9.0), rng.uniform(0.01, 1.0), rng.uniform(0.0, 0.999)
        assert upcross(c, p, rho) == _upcross_full(c, p, rho)


def test_shift_samples_are_counted_with_missing_values() -> None:
    """The (sum r, samples) reported at an alarm count the excursion's non-missing steps."""
    rng = np.random.default_rng(4)
    n_steps, n = 60, 6
    z = rng.standard_normal((n_steps, n)).astype(np.float32)
    z[20:, 0] += 4.0  # a lasting shift on rank 0
    ok = rng.random((n_steps, n)) > 0.2
    z[~ok] = 0.0
    t = ShiftTest(n, 5.0)
    first, since, sums, _ = t.run(z, np.ones((n_steps, n), np.float32), ok, np.arange(n_steps),
                                  ArModel(0.95, 0.4, 0.6), np.ones(n, bool))
    assert first[0] < n_steps
    assert sums[1, 0] == ok[since[0]:first[0] + 1, 0].sum() < sums[0, 0] == first[0] - since[0] + 1


def _tail_full(d: DetectorDesign, z: np.ndarray) -> float | None:
    """The root-based decision without the early exit: None where it moves the threshold."""
    z = z[np.abs(z) <= SPIKE_Z]
    counts, edges = np.histogram(np.clip(z, -d.clip, d.clip), bins=TAIL_BINS, range=(-d.clip, d.clip))
    seen = counts > 0
    p, x = counts[seen] / z.size, ((edges[:-1] + edges[1:]) / 2 - d.k)[seen]
    theta = _root(p, x)
    if not (-float(np.dot(p, x)) > 0 and theta > 0):
        return float(d.h)
    e = np.exp(theta * x)
    sd = math.sqrt(max(float(np.dot(p, e * e)) - float(np.dot(p, e)) ** 2, 0.0))
    se = sd / math.sqrt(z.size) / max(abs(float(np.dot(p, x * e))), 1e-12)
    return d.h if not theta + 2.0 * se < gaussian_exponent(d.k, d.clip) else None


@pytest.mark.parametrize("dof", [2.5, 4.0, 30.0])
@pytest.mark.parametrize("scale", [0.6, 1.0, 1.3])
def test_tail_threshold_early_exit_agrees_with_the_root(dof: float, scale: float) -> None:
    rng = np.random.default_rng(int(dof * 10 + scale * 100))
    z = (rng.standard_t(dof, 3000) * scale / math.sqrt(dof / (dof - 2))).astype(np.float32)
    for d in (DetectorDesign("fast", 1.5, 6.0, 3.6, 1e-8, 3), DetectorDesign("slow", 0.5, 17.0, 3.0, 1e-8, 0)):
        want = _tail_full(d, z)
        got = tail_threshold(d, z)
        assert got == want if want is not None else got >= d.h


def test_light_tails_take_the_early_exit_and_keep_the_design() -> None:
    """A sample lighter-tailed than the Gaussian (uniform): M at the Gaussian's exponent is
    below 1, the early exit is taken, and the full computation agrees."""
    z = np.random.default_rng(9).uniform(-1.7, 1.7, 4000).astype(np.float32)
    d = DetectorDesign("slow", 0.5, 17.0, 3.0, 1e-8, 0)
    counts, edges = np.histogram(np.clip(z, -d.clip, d.clip), bins=TAIL_BINS, range=(-d.clip, d.clip))
    seen = counts > 0
    p, x = counts[seen] / z.size, ((edges[:-1] + edges[1:]) / 2 - d.k)[seen]
    assert float(np.dot(p, np.exp(gaussian_exponent(d.k, d.clip) * x))) < 1.0 - 1e-6
    assert tail_threshold(d, z) == _tail_full(d, z) == d.h


def test_signature_of_a_white_model_is_flat() -> None:
    assert signature(ArModel()) == (1.0, 0.0)


def test_variogram_counts_drop_missing_values_and_spikes() -> None:
    """Each lag's histogram counts the finite differences below ``SPIKE_DIFF`` on its grid."""
    rng = np.random.default_rng(11)
    z = rng.standard_normal((80, 40)).astype(np.float32)
    z[rng.random(z.shape) < 0.05] = np.nan
    z[5, :] = 40.0  # a spike: its differences drop out
    v = Variogram(np.arange(z.shape[1]))
    v.add(z)
    for row, h in enumerate((0, *LAGS)):
        a = np.abs(z) if h == 0 else np.abs(z[h:] - z[:-h])
        idx = a.ravel() * np.float32(BINS / SPIKE_DIFF)
        want = np.bincount(idx[idx < BINS].astype(np.int64), minlength=BINS)
        assert np.array_equal(v.hist[row], want)
        assert 0 < v.hist[row].sum() < a.size


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("clip", [3.0, 3.6166666, np.float64(2.05)])
def test_tail_histogram_is_numpys(dtype: type, clip: float) -> None:
    """The same counts and centres as ``np.histogram``, values on the edges, beyond the range
    (a float32 clip can round past it) and NaN included."""
    rng = np.random.default_rng(12)
    a: np.ndarray = np.clip(rng.standard_t(3, 5000), -clip, clip).astype(dtype)
    a[::50], a[1::50], a[2::97] = dtype(clip), dtype(-clip), np.nan
    a[3::101] = 0.5 * clip + np.spacing(dtype(clip))  # around an inner edge
    counts, edges = np.histogram(a, bins=TAIL_BINS, range=(-clip, clip))
    got, centres = histogram(a, -clip, clip, TAIL_BINS)
    assert np.array_equal(got, counts)
    assert np.array_equal(centres, (edges[:-1] + edges[1:]) / 2)
    assert centres.dtype == edges.dtype

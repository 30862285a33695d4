"""The whitening filter's fast paths give the plain per-step loop's float32 values bit for bit
(the eval of the simulator week and the structures bench must not move): two models side by
side, leading rows missing everywhere from a zero state, and the cached Kalman gain."""

from __future__ import annotations

import math

import numpy as np
import pytest

from minutiae.analyses.stragglers.armodel import ArModel
from minutiae.analyses.stragglers.whiten import STATE_CLIP, Whitener, _innovations

MODELS = [ArModel(0.95, 0.4, 0.6), ArModel(0.8, 0.2, 0.8), ArModel(0.99, 0.7, 0.3)]


def _plain(r: np.ndarray, missing: np.ndarray | None, model: ArModel, sigma: np.ndarray,
           ) -> tuple[np.ndarray, np.ndarray]:
    """The filter as one loop of scalar-coefficient float32 steps (innovations, final state)."""
    phi, k = np.float32(model.phi), np.float32(_riccati(model))
    clip = (STATE_CLIP * sigma * math.sqrt(max(model.a + model.w, 1e-6))).astype(np.float32)
    level = np.zeros(r.shape[1], dtype=np.float32)
    out = np.empty_like(r)
    for t in range(r.shape[0]):
        level *= phi
        out[t] = r[t] - level
        if missing is not None:
            out[t][missing[t]] = np.float32(0.0)
        level += np.clip(out[t], -clip, clip) * k
    return out, level


def _riccati(m: ArModel) -> float:
    w = max(m.w, 1e-6 * m.a)
    pred = m.a
    for _ in range(500):
        new = m.phi * m.phi * pred * w / (pred + w) + m.a * (1.0 - m.phi * m.phi)
        if abs(new - pred) <= 1e-12 * pred:
            break
        pred = new
    return float(pred / (pred + w))


def _ratios(seed: int, steps: int = 120, ranks: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    r = (rng.standard_t(3, (steps, ranks)) * 0.8).astype(np.float32)  # heavy tails: clipping
    missing = rng.random((steps, ranks)) < 0.1
    missing[:40] = True  # a refit window before the job's first tested steps
    r[missing] = 0.0
    return r, missing


@pytest.mark.parametrize("model", MODELS)
def test_gain_is_the_riccati_fixed_point(model: ArModel) -> None:
    assert model.gain() == _riccati(model)
    assert model.gain() == model.gain()  # the cached answer is the same


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_leading_missing_rows_from_zero_state_are_the_plain_loop(seed: int) -> None:
    r, missing = _ratios(seed)
    sigma = np.linspace(0.5, 2.0, r.shape[1])
    w = Whitener(MODELS[0], sigma)
    got = w.innovations(r, missing)
    want, level = _plain(r, missing, MODELS[0], sigma)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    assert np.array_equal(w.level.view(np.int32), level.view(np.int32))
    assert not np.array_equal(got[40:], np.zeros_like(got[40:]))


def test_a_filter_with_state_runs_every_row() -> None:
    """Rows missing everywhere still decay a state that is not zero (no skipping then)."""
    r, missing = _ratios(4)
    w = Whitener(MODELS[1], np.ones(r.shape[1]))
    w.level[:] = np.float32(0.25)
    w.innovations(r[:40], missing[:40])
    want = np.float32(0.25)
    for _ in range(40):
        want *= np.float32(0.8)
    assert np.all(w.level == want)


@pytest.mark.parametrize("seed", [5, 6])
def test_models_side_by_side_are_each_model_alone(seed: int) -> None:
    r, missing = _ratios(seed)
    z = np.where(missing, np.float32(np.nan), r)
    pair = _innovations(z, MODELS[0], MODELS[2])
    for (nu, s), model in zip(pair, (MODELS[0], MODELS[2]), strict=True):
        (alone, s_alone), = _innovations(z, model)
        assert np.array_equal(nu, alone, equal_nan=True)
        assert s == s_alone
        want, _ = _plain(r, missing, model, np.ones(r.shape[1]))
        want[missing] = np.nan
        assert np.array_equal(nu, want[32:], equal_nan=True)

"""Change-point detection on seeded synthetic series with known truth."""

from __future__ import annotations

import math
import tomllib
from importlib import resources

import numpy as np
import pytest

from minutiae.analyses.regress.detect import (
    DetectorParams,
    detect_series,
    find_change_points,
    load_params,
    robust_sigma,
)
from minutiae.errors import ConfigError
from minutiae.history.record import Metric, RunRecord
from minutiae.testing.synth.regress import synth_series

P = load_params()


@pytest.mark.parametrize("size", [0.02, 0.03, -0.03, 0.05])
def test_shift_found_with_size_and_position(size: float) -> None:
    rng = np.random.default_rng(11)
    y, truth = synth_series(rng, 40, 80, noise=0.01, sizes=(size,), min_before=25, min_gap=25)
    exact = within1 = 0
    errs = []
    for t in truth:
        cuts = detect_series(y[t.series], P)
        near = [c for c in cuts if abs(c.index - t.index) <= 3]
        assert near, f"series {t.series}: {size:+.0%} at {t.index} not found, got {cuts}"
        best = min(near, key=lambda c: abs(c.index - t.index))
        within1 += abs(best.index - t.index) <= 1
        exact += best.index == t.index
        errs.append(best.change - size)
    # a 2-sigma shift is placed exactly in most series and within one run in nearly all
    assert exact >= 0.6 * len(truth)
    assert within1 >= 0.85 * len(truth)
    assert abs(float(np.median(errs))) < 0.003
    assert max(abs(e) for e in errs) < 0.012


def test_pure_noise_rarely_alarms() -> None:
    """Stated rate: ≤ 3 % of 100-run pure-noise series (2 % noise, 3 % outlier runs) alarm."""
    rng = np.random.default_rng(5)
    y, _ = synth_series(rng, 300, 100, noise=0.02)
    alarms = sum(bool(detect_series(y[i], P)) for i in range(300))
    assert alarms <= 9, alarms


def test_detection_within_five_runs_at_low_noise() -> None:
    rng = np.random.default_rng(3)
    y, truth = synth_series(rng, 30, 60, noise=0.005, sizes=(0.02,), min_before=30, min_gap=25)
    delays = []
    for t in truth:
        for m in range(1, 11):
            cuts = detect_series(y[t.series, : t.index + m], P)
            if any(abs(c.index - t.index) <= 2 and c.change > 0 for c in cuts):
                delays.append(m)
                break
        else:
            delays.append(99)
    assert np.median(delays) <= 5
    assert np.mean(np.array(delays) <= 5) >= 0.9


def test_transient_burst_is_not_a_change() -> None:
    y = np.zeros(60) + np.random.default_rng(1).normal(0, 0.01, 60)
    y[30:33] += math.log(1.15)      # three slow runs, then back
    assert detect_series(y, P) == []


def test_robust_sigma_ignores_level_shift() -> None:
    rng = np.random.default_rng(0)
    y = rng.normal(0, 0.01, 200)
    y[100:] += 0.2
    assert 0.008 < robust_sigma(y) < 0.012


def test_change_points_on_records_name_first_run_and_rates_flip_sign() -> None:
    rng = np.random.default_rng(8)
    vals = np.exp(rng.normal(0, 0.008, 50))
    vals[30:] *= 1.04
    recs = [RunRecord(f"r{i:03d}", 1e9 + i * 3600, "llama-70b", float(v)) for i, v in enumerate(vals)]
    rate = [RunRecord(f"t{i:03d}", 1e9 + i * 3600, "tok", 1000.0 / float(v), Metric.TOKENS_PER_S)
            for i, v in enumerate(vals)]
    (cp,) = find_change_points(recs)
    assert cp.run_id == "r030" and cp.signature == "llama-70b"
    assert 0.03 < cp.change < 0.05 and cp.confidence > 0.999
    assert (cp.n_before, cp.n_after) == (30, 20)
    (cq,) = find_change_points(rate)
    assert cq.run_id == "t030" and math.isclose(cq.change, cp.change, rel_tol=1e-9)


def test_shipped_examples_hold() -> None:
    data = tomllib.loads(resources.files("minutiae.analyses.regress").joinpath("regress.toml").read_text())
    for ex in data["example"]:
        rng = np.random.default_rng(42)
        y = rng.normal(0, math.log1p(ex["noise"]), ex["runs"])
        if ex["change_at"] >= 0:
            y[ex["change_at"]:] += math.log1p(ex["change"])
        cuts = detect_series(y, P)
        if ex["change_at"] < 0:
            assert cuts == [], ex["name"]
        else:
            assert [c.index for c in cuts] == [ex["change_at"]], ex["name"]
            assert abs(cuts[0].change - ex["change"]) < 0.01


def test_params_validated() -> None:
    assert isinstance(P, DetectorParams)
    with pytest.raises(ConfigError, match="unknown key"):
        load_params("[detector]\npenalty = 3\nbogus = 1\n")
    with pytest.raises(ConfigError, match="out-of-range"):
        load_params("[detector]\nalpha = 2.0\n")
    with pytest.raises(ConfigError, match="missing"):
        load_params("x = 1\n")
    with pytest.raises(ConfigError):
        load_params("[detector\n")

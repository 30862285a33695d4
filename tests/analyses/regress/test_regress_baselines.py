"""The published baselines find an obvious shift and stay quiet on flat data."""

from __future__ import annotations

import numpy as np

from minutiae.analyses.regress.baselines import edivisive, mozilla_ttest


def test_edivisive_and_mozilla_find_a_clear_step() -> None:
    rng = np.random.default_rng(2)
    y = rng.normal(0, 0.01, 90)
    y[50:] += 0.05
    assert edivisive(y, np.random.default_rng(0)) == [50]
    assert mozilla_ttest(y) == [50]


def test_mozilla_needs_twelve_runs_after() -> None:
    rng = np.random.default_rng(4)
    y = rng.normal(0, 0.01, 60)
    y[52:] += 0.08
    assert mozilla_ttest(y) == []          # only 8 runs after: the rule waits for 12


def test_edivisive_quiet_on_constant_series() -> None:
    assert edivisive(np.zeros(40), np.random.default_rng(0)) == []

"""The straggler detector on jobs whose noise is a real H200's step times (tests/data/h200/loaded/
step_noise.csv, measured with CUDA events on the board; bench/stragglers/realnoise.py builds the
jobs: R windows of one series as R ranks). Only the fault is injected."""

from __future__ import annotations

import numpy as np
import pytest
from bench_worlds import load_bench

rn = load_bench("realnoise")
SERIES = rn.series()
SEEDS = range(10)


def test_the_series_are_the_boards_own() -> None:
    """What the capture holds (so the tests below run on what the README says they do)."""
    gemm, copy, train = SERIES["gemm"], SERIES["copy"], SERIES["train"]
    assert gemm.size > 2500 and copy.size > 5000 and train.size > 2700
    assert 0.01 < train.std() < 0.03 and np.percentile(train - np.median(train), 99) > 0.05  # a real loop's tail
    assert 0.01 < gemm.std() < 0.02 and copy.std() < 0.003  # power-capped vs HBM-bound
    lag1 = float(np.corrcoef(gemm[1:], gemm[:-1])[0, 1])
    assert 0.6 < lag1 < 0.85  # wander, not independent noise


@pytest.mark.parametrize("workload", ["copy", "train"])
def test_no_suspect_and_a_5pc_gpu_within_20_steps(workload: str) -> None:
    """HBM-bound copies and a real training loop (a 730 M-parameter transformer, 95 ms steps).
    (+3 % sits on the 3 % floor: the board's slow drift, lag-50 autocorrelation 0.36, moves
    its estimate either side of it, so it is found on some seeds only: bench/stragglers/realnoise.txt.)"""
    x = SERIES[workload]
    for seed in SEEDS:
        assert rn.suspects(rn.job(x, 16, 150, seed, 0.0, 0), workload) == []
        target = seed % 16
        sus = rn.suspects(rn.job(x, 16, 150, seed, 0.05, target), workload)
        assert [s["ranks"] for s in sus] == [[target]]
        assert sus[0]["detected_step"] - rn.ONSET + 1 <= 20


@pytest.mark.parametrize("workload", ["gemm", "mixed"])
def test_a_10pc_gpu_is_found_under_the_power_caps_wander(workload: str) -> None:
    x = SERIES[workload]
    for seed in SEEDS:
        target = (3 * seed + 1) % 16
        sus = rn.suspects(rn.job(x, 16, 150, seed, 0.10, target), workload)
        assert any(s["scope"] == "gpu" and target in s["ranks"] for s in sus), seed

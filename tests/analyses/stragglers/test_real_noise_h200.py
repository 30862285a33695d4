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


@pytest.mark.parametrize("workload", ["gemm", "mixed"])
def test_power_capped_loops_after_their_ramp_have_no_suspect(workload: str) -> None:
    """The GEMM loops' only false suspects were the board's power ramp after the load changed
    (310 W to the 700 W cap, the clock dipping as the cap bites), which a job has on every GPU
    at once; placed mid-job on one rank (``+ramp``) it is one GPU slow for ~10 steps."""
    x = SERIES[workload]
    assert x.size < SERIES[f"{workload}+ramp"].size
    for seed in range(20):
        assert rn.suspects(rn.job(x, 16, 150, seed, 0.0, 0), workload) == [], seed


def test_the_ramp_is_cut_where_nvml_says_power_settled() -> None:
    import polars as pl

    d = pl.read_csv(rn.DATA).filter(pl.col("workload") == "gemm").sort("step")
    first = rn.settled(d) - rn.MARGIN
    power = d.filter(pl.col("power_w").is_not_null() & (pl.col("step") < first))["power_w"]
    assert power.max() < 0.97 * d["power_w"].median() and first <= 60  # a ramp, not the run


def _found_3pc(widen: bool, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The seeds 0-19 whose +3 % GPU on the training loop is found within 50 steps."""
    from minutiae.analyses.stragglers import floor
    real = floor.widened
    monkeypatch.setattr(floor, "widened", real if widen else lambda s, shift, var: real(s, shift, 0.0))
    x, found = SERIES["train"], []
    for seed in range(20):
        target = int(np.random.default_rng(1000 + seed).integers(16))
        sus = rn.suspects(rn.job(x, 16, 150, seed, 0.03, target), "train")
        hit = [s for s in sus if target in s["ranks"]]
        if hit and hit[0]["detected_step"] - rn.ONSET + 1 <= 50:
            found.append(seed)
    return found


def test_a_3pc_gpu_on_the_training_loop_is_found_within_50_steps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A +3 % fault measured +2.7-3.0 % with an interval to 3.0-3.3 %, less a warm-up offset
    of 0.2-0.5 % that was noise: it reaches the 3 % floor only once the interval counts that
    offset's own uncertainty (``floor.widened``): 16 of 20 without it. With it, all but one
    (the fault is at the floor, and a 95 % interval may miss: seed 8 measures 2.95 % less a
    0.45 % warm-up offset, 2.3 standard errors under its truth)."""
    assert len(_found_3pc(True, monkeypatch)) >= 19
    assert len(_found_3pc(False, monkeypatch)) <= 17

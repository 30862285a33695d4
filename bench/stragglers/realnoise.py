"""minutiae's straggler detector on jobs whose noise is a real GPU's, not a generator's.

The noise: ``tests/data/h200/loaded/step_noise.csv``, step times of one NVIDIA H200 measured
back to back with CUDA events (``scripts/device/step_noise.py``, 2026-12-04): ``gemm`` (bf16
matrix products running into the 700 W power cap: 16.6 ms steps, sd 1.5 %, lag-1
autocorrelation 0.74), ``copy`` (HBM-bound: 8.1 ms, sd 0.18 %, 0.75) and ``mixed`` (11.7 ms,
sd 1.4 %, 0.66); and ``train``: a 12-layer transformer (d 2048, 730 M parameters, bf16, AdamW)
training on random tokens, ``tests/data/h200/loaded/train_noise.csv`` (``train_noise.py``:
95 ms steps, sd 1.7 %, lag-1 0.55, 1 % of steps over +7.9 %, the power cap always on).
A job of R ranks takes R non-overlapping windows of one series (after a random
rotation per seed) as its ranks' step times: real wander, spikes and power-cap dynamics, one
board at different times standing in for R boards (say so when quoting). Nothing is generated
but the fault: ``+X %`` from step ``ONSET`` on one random rank.

Each workload's first steps are the board's power ramp after the load changed (gemm: 310 W to
the 700 W cap in 40 steps, the clock dipping to 1320 MHz as the cap bites; copy: 660 W down to
475 W over 110 steps). In a job every GPU ramps at once, at its start (or after a checkpoint
pause), so it is the job's shared factor and its warm-up; a window of one board's series puts it
mid-job on one rank instead. ``settled`` rows cut each series up to where NVML's power first
comes within ``SETTLED`` of its median, plus ``MARGIN`` steps; ``+ramp`` rows keep it (one GPU
re-ramping alone mid-job, which a synchronous job does not do).

    .venv/bin/python bench/stragglers/realnoise.py [--seeds 20] [--ranks 16] [--steps 150]
        [--step-seconds S]

``--step-seconds S`` rescales each series so its median step lasts S seconds: the same relative
noise, a per-step false-alarm budget as for a job of S-second steps.

Prints, per workload: benign jobs with suspects (goal 0) and, per fault size, jobs where the
rank was found and the delay in steps from the onset (goals: +10 % <= 5, +5 % <= 20,
+3 % <= 50).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("MINUTIAE_SRC") or str(ROOT / "src"))

from minutiae.analyses.stragglers.analysis import Options  # noqa: E402
from minutiae.analyses.stragglers.runs import analyse_runs  # noqa: E402
from minutiae.errors import MinutiaeError  # noqa: E402

DATA = ROOT / "tests" / "data" / "h200" / "loaded" / "step_noise.csv"
TRAIN = DATA.with_name("train_noise.csv")
ONSET = 50
GOALS = {0.10: 5, 0.05: 20, 0.03: 50}
GPUS_PER_NODE = 8
SETTLED = 0.03
MARGIN = 20


def settled(d: pl.DataFrame) -> int:
    """The first step of a workload's series after its power ramp (``SETTLED``, ``MARGIN``)."""
    p = d.filter(pl.col("power_w").is_not_null())
    med = float(p["power_w"].median())
    first = int(p.filter((pl.col("power_w") / med - 1).abs() <= SETTLED)["step"][0])
    return first + MARGIN


def series() -> dict[str, np.ndarray]:
    """Each workload's log step times (seconds), in step order: the detector sees the real step
    length (its false-alarm budget is per node-day, so per step it depends on it). ``NAME``: the
    series after its power ramp; ``NAME+ramp``: the whole series."""
    df = pl.read_csv(DATA)
    out = {}
    for name in df["workload"].unique(maintain_order=True).to_list():
        d = df.filter(pl.col("workload") == name).sort("step")
        s = d["seconds"].to_numpy()
        out[name] = np.log(s[settled(d):])
        out[f"{name}+ramp"] = np.log(s)
    # at the cap from its first read (682-697 W); its first step pays CUDA's warm-up
    s = pl.read_csv(TRAIN).sort("step")["seconds"].to_numpy()[1:]
    out["train"] = np.log(s)
    return out


def job(x: np.ndarray, ranks: int, steps: int, seed: int, fault: float, target: int) -> pl.DataFrame:
    """The long table of one job: rank r's noise is window r of the rotated series."""
    if x.size < ranks * steps:
        raise SystemExit(f"{x.size} steps of noise cannot make {ranks} ranks x {steps} steps")
    rng = np.random.default_rng(seed)
    rot = np.roll(x, int(rng.integers(x.size)))
    order = rng.permutation(x.size // steps)[:ranks]
    logx = np.stack([rot[w * steps:(w + 1) * steps] for w in order], axis=1)  # (steps, ranks)
    if fault:
        logx[ONSET:, target] += np.log1p(fault)
    seconds = np.exp(logx)
    rank = np.broadcast_to(np.arange(ranks), (steps, ranks))
    return pl.DataFrame({
        "step": np.broadcast_to(np.arange(steps)[:, None], (steps, ranks)).ravel(),
        "rank": rank.ravel(), "seconds": seconds.ravel(),
        "node": [f"n{r // GPUS_PER_NODE:03d}" for r in rank.ravel()],
        "gpu": (rank % GPUS_PER_NODE).ravel(),
    })


def suspects(df: pl.DataFrame, name: str) -> list[dict]:
    try:
        return [s.to_json() for s in analyse_runs(df, name, None, Options()).suspects]
    except MinutiaeError as exc:
        raise SystemExit(f"{name}: refused: {exc}") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--step-seconds", type=float, default=0.0)
    a = ap.parse_args()
    length = f"median step {a.step_seconds:g} s" if a.step_seconds > 0 else "real step length"
    print(f"real H200 step noise ({DATA.relative_to(ROOT)}), {a.ranks} ranks x {a.steps} steps, "
          f"{a.seeds} seeds, fault onset step {ONSET}, {length}")
    print(f"{'workload':10s} {'benign: jobs w/ suspects':>25s}   " +
          "   ".join(f"+{int(f * 100)}%: found, within goal, p50 delay, other" for f in GOALS))
    for name, x in series().items():
        if a.step_seconds > 0:
            x = x - np.median(x) + np.log(a.step_seconds)
        benign = [len(suspects(job(x, a.ranks, a.steps, s, 0.0, 0), name)) for s in range(a.seeds)]
        cells = []
        for size, goal in GOALS.items():
            found, delays, other = 0, [], 0
            for s in range(a.seeds):
                target = int(np.random.default_rng(1000 + s).integers(a.ranks))
                sus = suspects(job(x, a.ranks, a.steps, s, size, target), name)
                hit = [d for d in sus if d["scope"] == "gpu" and target in d["ranks"]]
                other += len(sus) - len(hit)
                if hit:
                    found += 1
                    delays.append(min(d["detected_step"] for d in hit) - ONSET + 1)
            within = sum(d <= goal for d in delays)
            p50 = f"{statistics.median(delays):.0f}" if delays else "-"
            cells.append(f"{found:2d}/{a.seeds}, {within:2d}/{a.seeds} <= {goal}, {p50:>3s}, {other}")
        print(f"{name:10s} {sum(c > 0 for c in benign):>13d}/{a.seeds} ({sum(benign)} suspects)   "
              + "   ".join(cells))


if __name__ == "__main__":
    main()

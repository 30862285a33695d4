"""Why are 2 % partial NCCL rollouts missed? Bias of the oracle's estimate, split by cause.

On the *training* fleets of ``bench/regress/partial.py`` (seeds 7000 x share + i; never the
held-out 1000/5000/9000), the oracle's estimate of the NCCL effect on its hit signatures is a
linear function of ln(step time): beta = L y, L the hit column's row of the least-squares
solution after the two-way projection. The generator's truth splits y into its parts (the NCCL
effect, the other rollouts, each signature's own code changes, the slow node, noise with outlier
runs), so L applied to each part is exactly what that part adds to the estimate: the rollouts
in the design add their own effect or 0, a code change or the slow node (the design has only
the *estimated* slow-node penalty) add a bias, and the rest is noise (with the clipping of
outlier runs). Printed per NCCL rollout of 2 %: what else changed on its signatures and in its
weeks, and each part's bias in % and in standard errors; then the recall of the oracle, of an
oracle also told the code changes and the slow node (what nuisance terms could reach if those
were fields of the runs) and of ours (``RULE``) by effect size.

    .venv/bin/python bench/regress/confound.py [--fleets 15] [--seed-base 7000] [--all]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from minutiae.analyses.whatchanged.rollouts import (  # noqa: E402
    _exposures,
    _node_penalty,
    attribute_rollouts,
)
from minutiae.analyses.whatchanged.rule import RULE  # noqa: E402
from minutiae.analyses.whatchanged.stats import fe_joint, make_panel  # noqa: E402
from minutiae.testing.synth.regress import DAY, START, FleetConfig  # noqa: E402

HELD_OUT = (1000, 5000, 9000)
SLOW = math.log1p(FleetConfig().slow_node_effect)


def _partial() -> Any:
    spec = importlib.util.spec_from_file_location("partial_bench", ROOT / "bench/regress/partial.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True, slots=True)
class Row:
    """One NCCL rollout: the oracle's estimate and se (ln units), each part's bias (ln units),
    the p-values of the oracle and of the oracle told the confounders, ours, and what changed."""

    seed: int
    share: int
    effect: float
    beta: float
    se: float
    code: float
    slow: float
    noise: float
    p_oracle: float
    p_told: float
    ours: bool
    ours_said: str
    notes: tuple[str, ...]


def _design(panel: Any, rolls: list[Any], effects: dict[str, float], hit_sigs: set[str],
            extra: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """The oracle's columns (``partial.oracle_p``) plus ``extra``; index of the hit column."""
    anys, alls, missing = _exposures(panel, rolls)
    chosen = [alls[k] if effects[ro.attr] < 0 else anys[k] for k, ro in enumerate(rolls)]
    i = next(k for k, ro in enumerate(rolls) if ro.attr == "nccl")
    hit = np.isin(np.array([r.signature for r in panel.runs]), sorted(hit_sigs))
    cols = [c for k, c in enumerate(chosen) if k != i] + [m for m in missing if m.any()]
    x = np.column_stack([*cols, *extra, chosen[i] * hit, chosen[i] * ~hit])
    return x, x.shape[1] - 2


def _parts(panel: Any, f: Any, sig_of_run: dict[str, str]) -> tuple[list[tuple[Any, np.ndarray]],
                                                                    np.ndarray]:
    """Each true code change's column (ln units) and the true slow-node column."""
    t = panel.t
    sig = np.array([r.signature for r in panel.runs])
    t_of = {r.run_id: r.time for r in panel.runs}
    code = [(c, math.log1p(c.size) * ((sig == sig_of_run[c.run_id]) & (t >= t_of[c.run_id])))
            for c in f.code_changes]
    slow = np.array([any(nd in f.slow_nodes and f.slow_nodes[nd] <= r.time for nd in r.nodes)
                     for r in panel.runs], dtype=float) * SLOW
    return code, slow


def analyse(bench: Any, seed: int, share: int, effect: float, empty: float, run_ours: bool,
            scale: int = 1) -> Row:
    runs, rolls, effects, hit_sigs, f = bench.fleet_truth(seed, share, effect, empty,
                                                          (40 * scale, 120 * scale))
    panel = make_panel(runs)
    sig_of_run = {r.run_id: r.signature for r in runs}
    code, slow = _parts(panel, f, sig_of_run)
    x, j = _design(panel, rolls, effects, hit_sigs, [_node_penalty(panel)])
    a = panel.demean(x)
    lrow = (np.linalg.pinv(a.T @ a) @ a.T)[j]
    e = fe_joint(panel, x)[j]
    assert e is not None
    beta = math.log1p(e.change)
    bias_code = [float(lrow @ panel.demean(v)) for _, v in code]
    bias_slow = float(lrow @ panel.demean(slow))
    noise = beta - math.log1p(effect) - sum(bias_code) - bias_slow
    told_cols = [v for _, v in code if v.any()] + [slow]
    xt, jt = _design(panel, rolls, effects, hit_sigs, told_cols)
    et = fe_joint(panel, xt)[jt]
    ours, said = False, ""
    if run_ours:
        v = next(v for v in attribute_rollouts(runs, rolls) if v.attr == "nccl")
        ours, said = v.cause, v.summary()
    nccl = next(ro for ro in rolls if ro.attr == "nccl")
    t_of = {r.run_id: r.time for r in runs}
    notes = [_code_note(c, b, sig_of_run[c.run_id] in hit_sigs, t_of[c.run_id]) for (c, _), b in
             zip(code, bias_code, strict=True) if abs(b) >= 0.1 * e.se]
    notes += [f"slow node {nd} from day {(on - START) / DAY:.0f}" for nd, on in f.slow_nodes.items()]
    notes += [f"{ro.attr} {effects[ro.attr]:+.0%} from day {(ro.start - START) / DAY:.0f}"
              for ro in rolls if ro.attr != "nccl" and effects[ro.attr] != 0
              and abs(ro.start - nccl.start) <= 7 * DAY]
    return Row(seed, share, effect, beta, e.se, sum(bias_code), bias_slow, noise, e.p_value,
               1.0 if et is None else et.p_value, ours, said,
               (f"NCCL from day {(nccl.start - START) / DAY:.0f}", *notes))


def _code_note(c: Any, bias: float, hit: bool, at: float) -> str:
    return (f"code {c.size:+.0%} on a {'hit' if hit else 'rest'} signature from day "
            f"{(at - START) / DAY:.0f}: bias {bias * 100:+.2f} %")


def rows(fleets: int, seed_base: int, everything: bool) -> list[Row]:
    bench = _partial()
    out = []
    for share in (1, 2, 3, 4):
        for i in range(fleets):
            seed = seed_base * share + i
            if any(h * s <= seed < h * s + 100 for h in HELD_OUT for s in (1, 2, 3, 4)):
                raise SystemExit(f"seed {seed} is a held-out seed: pick another --seed-base")
            effect = float(np.random.default_rng(seed).choice([0.02, 0.03, 0.05, -0.03, -0.02]))
            out.append(analyse(bench, seed, share, effect, 0.05 if i % 2 else 0.0,
                               everything or abs(effect) == 0.02))
    return out


def curve_rows(fleets: int, scale: int) -> list[Row]:
    """The 2 % cell of ``operating.py --curve`` at ``scale`` x the runs (its seeds 70000 + 1000 x
    cell + i, shares 1-4 in turn, sign alternating; its first 8 fleets are that cell's)."""
    bench = _partial()
    cell = {1: 0, 2: 1, 4: 2}[scale]
    return [analyse(bench, 70000 + 1000 * cell + i, 1 + i % 4, 0.02 if i % 2 == 0 else -0.02, 0.0,
                    True, scale) for i in range(fleets)]


def report(rs: list[Row], everything: bool) -> None:
    level = RULE.alpha / 5
    print(f"{'seed':>6} {'eff':>5} {'ours':>4} {'oracle':>7} {'se':>5} {'t':>5} {'code':>6} "
          f"{'slow':>6} {'noise':>6} {'p':>8} {'p told':>8}   (bias in %; t = estimate / se)")
    for r in rs:
        if abs(r.effect) != 0.02 and not everything:
            continue
        print(f"{r.seed:6d} {r.effect:+5.2f} {'yes' if r.ours else 'MISS':>4} {r.beta * 100:+7.2f} "
              f"{r.se * 100:5.2f} {r.beta / r.se:+5.1f} {r.code * 100:+6.2f} {r.slow * 100:+6.2f} "
              f"{r.noise * 100:+6.2f} {r.p_oracle:8.2g} {r.p_told:8.2g}")
        if not r.ours or r.p_oracle >= level:
            print(f"       {r.ours_said}; " + "; ".join(r.notes))
    print(f"\nrecall at the verdict's level (p < {level:g}) by |effect|: oracle / oracle told the "
          "code changes and the slow node / ours (RULE); RMS bias in se units: code, slow, noise")
    for eff in sorted({abs(r.effect) for r in rs}):
        sub = [r for r in rs if abs(r.effect) == eff]
        n = len(sub)

        def rms(v: list[float]) -> float:
            return math.sqrt(sum(x * x for x in v) / max(len(v), 1))

        ours = f"{sum(r.ours for r in sub)}/{n}" if everything or eff == 0.02 else "-"
        print(f"  {eff:.2f}: oracle {sum(r.p_oracle < level for r in sub)}/{n}, told "
              f"{sum(r.p_told < level for r in sub)}/{n}, ours {ours}; bias/se RMS code "
              f"{rms([r.code / r.se for r in sub]):.2f}, slow {rms([r.slow / r.se for r in sub]):.2f}, "
              f"noise {rms([r.noise / r.se for r in sub]):.2f}; median se "
              f"{float(np.median([r.se for r in sub])) * 100:.2f} %")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleets", type=int, default=15)
    ap.add_argument("--seed-base", type=int, default=7000)
    ap.add_argument("--all", action="store_true", help="every effect size in the table, ours too")
    ap.add_argument("--scale", type=int, default=0, choices=(0, 1, 2, 4),
                    help="instead: the 2 %% cells of operating.py --curve at this x the runs")
    a = ap.parse_args()
    load0, t0, w0 = os.getloadavg()[0], time.process_time(), time.perf_counter()
    rs = curve_rows(a.fleets, a.scale) if a.scale else rows(a.fleets, a.seed_base, a.all)
    where = (f"{a.fleets} fleets of the --curve 2 % cell at {a.scale}x the runs" if a.scale else
             f"{a.fleets} training fleets per share, seeds {a.seed_base} x share + i")
    print(f"confounders of the NCCL estimate: {where}, load {load0:.1f}-{os.getloadavg()[0]:.1f}, "
          f"{time.process_time() - t0:.0f} s CPU, {time.perf_counter() - w0:.0f} s wall")
    report(rs, a.all)


if __name__ == "__main__":
    main()

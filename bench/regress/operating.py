"""The operating point of rollout attribution, chosen on training fleets by a stated rule.

The fleets are those of ``bench/regress/partial.py`` (30 signatures in 4 families, one NCCL
rollout of +-2/3/5 % on 1-4 families, 4 other rollouts of +-2/3/5 % or 0, 2 % noise), on
*training* seeds only (``--seed-base 7000``: seeds 7000 x share + i; the held-out seeds 1000,
5000 and 9000 are never looked at here). Each fleet is attributed once with the split screens
at their loosest (``CauseRule(het_alpha=0.05, group_min_effect=0.005)``) and every verdict kept;
the decision rule (``minutiae.analyses.whatchanged.rule.CauseRule``) is then applied to those
verdicts for every point of a grid: family-wise rate ``alpha``, group floor, leave-one-out level,
heterogeneity screen, Bonferroni over groupings or not.

P = causes among rollouts that really change speed / causes (all 5 rollouts: a null rollout
credited with a group effect counts against it); R = NCCL rollouts found (all have
|effect| >= 2 %); 15 more fleets without model families (``collect_plain``) add to P.
**Selection rule**: the grid point that maximises min(P, R) on the training fleets at the
family-wise rate ``FAMILY_WISE``; ties go to the stricter point. The curve is printed for every
rate. The chosen point is the default ``RULE``, measured once, with the real code, on the
held-out seeds (``partial.py --seed-base 1000 / 5000 / 9000``). ``--curve N``: recall by effect
size and run count instead.

    .venv/bin/python bench/regress/operating.py [--fleets 15] [--seed-base 7000] [--curve 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import pickle
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from minutiae.analyses.whatchanged.rollouts import attribute_rollouts  # noqa: E402
from minutiae.analyses.whatchanged.rule import RULE, CauseRule  # noqa: E402

HELD_OUT = (1000, 5000, 9000)
LOOSE = CauseRule(het_alpha=0.05, group_min_effect=0.005)
#: group floors tried. 0.5 and 1 % were in the grid first: the point chosen then (alpha 0.1,
#: floors 1 % / 1 %: P 0.987, R 0.900 on these fleets) called two null rollouts causes in
#: test_rollout_precision_recall_over_seeds (+1.0 and +1.5 % on the 64-GPU group of seed 101:
#: the confound -- slow node, one model's own change -- that the 1.5 % floor is there for, and
#: that these training fleets under-represent), so floors below 1.5 % are out of the grid.
#: ``--all-floors`` puts them back.
GROUP_FLOORS = (0.015, 0.02)
#: family-wise rates tried; the choice is made at ``FAMILY_WISE`` (the documented contract):
#: alpha 0.1, the largest min(P, R) on these fleets, called a +0.8 % null image rollout
#: (p 0.005) a cause in test_rollout_precision_recall_over_seeds. The curve shows the others.
FAMILY_WISE = 0.01
GRID = {"alpha": (0.01, 0.02, 0.05, 0.1, 0.2), "min_effect": (0.005, 0.01),
        "group_min_effect": GROUP_FLOORS,
        "robust_p": (0.05, 0.1, 0.2, 1.0), "het_alpha": (0.01, 0.05),
        "group_bonferroni": (True, False)}


def _partial() -> Any:
    spec = importlib.util.spec_from_file_location("partial_bench", ROOT / "bench/regress/partial.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True, slots=True)
class Case:
    """One rollout of one training fleet: its true effect and the loose pass's verdict."""

    share: int
    seed: int
    attr: str
    effect: float
    verdict: Any
    n_rollouts: int
    oracle_p: float


def collect(fleets: int, seed_base: int) -> tuple[list[Case], float]:
    bench = _partial()
    cases, cpu = [], 0.0
    for share in (1, 2, 3, 4):
        for i in range(fleets):
            seed = seed_base * share + i
            if any(h * s <= seed < h * s + 100 for h in HELD_OUT for s in (1, 2, 3, 4)):
                raise SystemExit(f"seed {seed} is a held-out seed: pick another --seed-base")
            effect = float(np.random.default_rng(seed).choice([0.02, 0.03, 0.05, -0.03, -0.02]))
            runs, rolls, effects, hit = bench.fleet(seed, share, effect, 0.05 if i % 2 else 0.0)
            orc = bench.oracle_p(runs, rolls, effects, hit)
            t0 = time.process_time()
            verdicts = attribute_rollouts(runs, rolls, LOOSE)
            cpu += time.process_time() - t0
            for v in verdicts:
                cases.append(Case(share, seed, v.attr, effects[v.attr], v, len(verdicts),
                                  orc if v.attr == "nccl" else 1.0))
    return cases, cpu


def collect_plain(fleets: int, seed_base: int) -> tuple[list[Case], float]:
    """Fleets without model families (only the size grouping can split), 4 fleet-wide rollouts
    of +-2/3/5 % or 0 each: where a split is most exposed to the slow-node confound (big jobs
    draw the slow node more often). Seeds 5 x seed-base + i. ``share`` 0."""
    from minutiae.history.rollouts import group_rollouts
    from minutiae.testing.synth.regress import FleetConfig, RolloutSpec, synth_fleet

    cases, cpu = [], 0.0
    for i in range(fleets):
        seed = 5 * seed_base + i
        rng = np.random.default_rng(seed)
        specs = tuple(RolloutSpec(a, float(rng.choice([0.02, -0.02, 0.03, -0.03, 0.05, 0, 0, 0])),
                                  float(rng.uniform(0.3, 1.0)), float(rng.uniform(5, 45)),
                                  float(rng.uniform(2, 7)))
                      for a in ("driver", "nccl", "kernel", "image"))
        f = synth_fleet(FleetConfig(seed=seed, rollouts=specs))
        t0 = time.process_time()
        verdicts = attribute_rollouts(f.records, group_rollouts(f.changes), LOOSE)
        cpu += time.process_time() - t0
        eff = {s.attr: s.effect for s in specs}
        cases += [Case(0, seed, v.attr, eff[v.attr], v, len(verdicts), 1.0) for v in verdicts]
    return cases, cpu


def cause(rule: CauseRule, c: Case) -> bool:
    v = c.verdict
    return rule.fleet_cause(v.effect, v.overlap, c.n_rollouts) or rule.group_cause(
        v.groups, v.hit_overlap, c.n_rollouts)


def score(rule: CauseRule, cases: list[Case]) -> tuple[float, float, float]:
    """(P over all rollouts, R of NCCL, R of all rollouts with |effect| >= 2 %)."""
    flags = [(c, cause(rule, c)) for c in cases]
    real = sum(f and c.effect != 0 for c, f in flags)
    null = sum(f and c.effect == 0 for c, f in flags)
    nccl = [f for c, f in flags if c.attr == "nccl" and c.share > 0]
    big = [f for c, f in flags if abs(c.effect) >= 0.02]
    return real / max(real + null, 1), sum(nccl) / max(len(nccl), 1), sum(big) / max(len(big), 1)


def grid() -> list[CauseRule]:
    keys = list(GRID)
    return [CauseRule(**dict(zip(keys, vals, strict=True)))  # type: ignore[arg-type]
            for vals in itertools.product(*(GRID[k] for k in keys))]


def choose(cases: list[Case]) -> tuple[CauseRule, list[tuple[CauseRule, tuple[float, float, float]]]]:
    scored = [(r, score(r, cases)) for r in grid()]
    best = max((rs for rs in scored if rs[0].alpha == FAMILY_WISE), key=lambda rs: (min(rs[1][0], rs[1][1]), -rs[0].alpha,
                                       rs[0].group_min_effect, rs[0].min_effect, -rs[0].robust_p,
                                       -rs[0].het_alpha, rs[0].group_bonferroni))
    return best[0], scored


def _fmt(r: CauseRule) -> str:
    return (f"alpha {r.alpha:<5} floor {r.min_effect:<5} group {r.group_min_effect:<5} robust {r.robust_p:<4} "
            f"het {r.het_alpha:<4} bonf {'y' if r.group_bonferroni else 'n'}")


def report(cases: list[Case], best: CauseRule,
           scored: list[tuple[CauseRule, tuple[float, float, float]]]) -> None:
    print("P/R curve (training): per alpha, the grid point with the best min(P, R_nccl)")
    print(f"{'rule':64} {'P':>6} {'R nccl':>7} {'R all':>6} {'oracle R':>8}")
    nccl = [c for c in cases if c.attr == "nccl" and c.share > 0]
    for a in GRID["alpha"]:
        r, s = max(((r, s) for r, s in scored if r.alpha == a),
                   key=lambda rs: (min(rs[1][0], rs[1][1]), rs[0].group_min_effect))
        orc = sum(c.oracle_p < a / c.n_rollouts for c in nccl) / max(len(nccl), 1)
        print(f"{_fmt(r):64} {s[0]:6.3f} {s[1]:7.3f} {s[2]:6.3f} {orc:8.3f}")
    for name, r in (("today's RULE", RULE), ("chosen", best)):
        s = score(r, cases)
        print(f"{name:>13}: {_fmt(r)}  P {s[0]:.3f} R nccl {s[1]:.3f} R all {s[2]:.3f}")
    print("chosen point, NCCL recall by |effect| and by share hit (training):")
    for key, label in ((lambda c: abs(c.effect), "|effect|"), (lambda c: c.share, "share")):
        for k in sorted({key(c) for c in nccl}):
            sub = [c for c in nccl if key(c) == k]
            orc = sum(c.oracle_p < best.alpha / c.n_rollouts for c in sub)
            print(f"  {label} {k}: {sum(cause(best, c) for c in sub)}/{len(sub)} (oracle {orc})")
    print("chosen point, errors (training seeds):")
    for c in cases:
        got = cause(best, c)
        if got != (c.effect != 0):
            v = c.verdict
            p = f"{v.effect.p_value:.3g}" if v.effect else "-"
            print(f"  seed {c.seed} {c.attr} effect {c.effect:+.2f} {'false cause' if got else 'miss'}"
                  f": {v.summary()} (fleet-wide p {p}, {v.exposure}; oracle p {c.oracle_p:.3g})")


def curve(fleets: int) -> None:
    """Recall of a partial NCCL rollout by effect size and run count (runs per signature x 1, 2,
    4 of the bench's 40-120), ours at ``RULE`` and the oracle at its level: what reaches 0.95.
    Seeds 70000 + 1000 x cell + i (training side), shares 1-4 in turn, sign alternating."""
    bench = _partial()
    print(f"{'|effect|':>8} {'runs/sig':>9} {'ours':>6} {'oracle':>7}  (NCCL recall, {fleets} fleets)")
    for c, (eff, scale) in enumerate(itertools.product((0.02, 0.03), (1, 2, 4))):
        ours = orc = 0
        for i in range(fleets):
            seed, share = 70000 + 1000 * c + i, 1 + i % 4
            e = eff if i % 2 == 0 else -eff
            runs, rolls, effects, hit = bench.fleet(seed, share, e, 0.0, (40 * scale, 120 * scale))
            orc += bench.oracle_p(runs, rolls, effects, hit) < RULE.alpha / len(effects)
            ours += next(v.cause for v in attribute_rollouts(runs, rolls) if v.attr == "nccl")
        print(f"{eff:8.2f} {f'{40 * scale}-{120 * scale}':>9} {ours / fleets:6.2f} {orc / fleets:7.2f}",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleets", type=int, default=15)
    ap.add_argument("--seed-base", type=int, default=7000)
    ap.add_argument("--all-floors", action="store_true", help="group floors 0.5 and 1 %% too")
    ap.add_argument("--plain", type=int, default=15, help="fleets without families (0: none)")
    ap.add_argument("--cache", type=Path, help="keep the verdicts here (pickle) and reuse them")
    ap.add_argument("--curve", type=int, default=0,
                    help="instead: recall by effect size and run count on this many fleets a cell")
    a = ap.parse_args()
    if a.curve:
        curve(a.curve)
        return
    if a.all_floors:
        GRID["group_min_effect"] = (0.005, 0.01, *GROUP_FLOORS)
    load0, w0 = os.getloadavg()[0], time.perf_counter()
    if a.cache and a.cache.exists():
        cases, cpu = pickle.loads(a.cache.read_bytes())
    else:
        cases, cpu = collect(a.fleets, a.seed_base)
        if a.cache:
            a.cache.write_bytes(pickle.dumps((cases, cpu)))
    plain_cache = a.cache.with_suffix(".plain") if a.cache else None
    if plain_cache and plain_cache.exists():
        more, cpu2 = pickle.loads(plain_cache.read_bytes())
    else:
        more, cpu2 = collect_plain(a.plain, a.seed_base)
        if plain_cache:
            plain_cache.write_bytes(pickle.dumps((more, cpu2)))
    cases, cpu = cases + more, cpu + cpu2
    best, scored = choose(cases)
    print(f"operating point: {a.fleets} training fleets per share, seeds {a.seed_base} x share + i,"
          f" {a.plain} without families (seeds 5 x {a.seed_base} + i),"
          f" {len(grid())} grid points, load {load0:.1f}-{os.getloadavg()[0]:.1f}, "
          f"attribution {cpu:.0f} s CPU, {time.perf_counter() - w0:.0f} s wall in all")
    report(cases, best, scored)


if __name__ == "__main__":
    main()

"""Benchmark of the regression analyses on synthetic histories with known truth.

Side by side, on the same series in one run:
  ours      ruptures PELT (KernelCPD, least squares) + noise-aware confirmation, plus the online
            CUSUM stage (regress.toml [online]); its alerts are the confirmed cuts of the whole
            series AND every alarm the CUSUM raised while the series grew (what a monitor showed)
  pelt      the change-point search alone (no online stage)
  edivisive E-Divisive means + permutation test (MongoDB's published method; p 0.05, 100 perms)
  mozilla   Perfherder t-test rule (12/12 windows, t > 7)
Figures: alarms on pure-noise series %, false-positive alert groups % (alerts within 5 runs of
each other form a group; a group is true when one of its alerts lies within ±5 runs of an injected
change of the same sign), missed %, detection delay of 2 % shifts (runs after the change until
reported, capped at 21 = not within 20), time per series; then rollout attribution precision/recall (two-way fixed
effects vs a naive with/without comparison). Medians (and ranges) over repeats with different seeds.

    .venv/bin/python bench/regress/run.py [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
from scipy import stats

from minutiae.analyses.regress.baselines import edivisive, mozilla_ttest
from minutiae.analyses.regress.detect import confirmed_cuts, detect_series, load_params
from minutiae.analyses.regress.online import online_alarms
from minutiae.analyses.whatchanged.rollouts import attribute_rollouts
from minutiae.history.rollouts import group_rollouts
from minutiae.testing.synth.regress import FleetConfig, RolloutSpec, synth_fleet, synth_series

P = load_params()
MATCH = 5          # an alert within ±5 runs of a true change (same direction) finds it
SIZES = (0.02, -0.02, 0.03, -0.03, 0.05)


def detectors(seed: int) -> dict[str, Callable[[np.ndarray], list[tuple[int, float]]]]:
    rng = np.random.default_rng(seed)

    def ours(y: np.ndarray) -> list[tuple[int, float]]:
        return ([(c.index, c.change) for c in detect_series(y, P)]
                + [(a.index, a.change) for a in online_alarms(y, P.online)])

    def pelt(y: np.ndarray) -> list[tuple[int, float]]:
        return [(c.index, c.change) for c in confirmed_cuts(y, P)]

    def _sign(y: np.ndarray, cuts: list[int]) -> list[tuple[int, float]]:
        b = [0, *cuts, y.size]
        return [(c, float(np.mean(y[c:b[i + 2]]) - np.mean(y[b[i]:c]))) for i, c in enumerate(cuts)]

    return {"ours": ours, "pelt": pelt,
            "edivisive": lambda y: _sign(y, edivisive(y, rng)),
            "mozilla": lambda y: _sign(y, mozilla_ttest(y))}


def groups(alerts: list[tuple[int, float]]) -> list[list[tuple[int, float]]]:
    out: list[list[tuple[int, float]]] = []
    for a in sorted(alerts):
        if out and a[0] - out[-1][-1][0] <= MATCH:
            out[-1].append(a)
        else:
            out.append([a])
    return out


def offline(seed: int, noise: float, n_series: int, outliers: float = 0.03,
            n_runs: int = 120) -> dict[str, dict[str, float]]:
    """A mix of series: one third pure noise, one third one shift, one third two shifts."""
    rng = np.random.default_rng(seed)
    k = n_series // 3
    batches = [synth_series(rng, k, n_runs, noise, outlier_rate=outliers)]
    for sizes in [(float(rng.choice(SIZES)),), (float(rng.choice(SIZES)), float(rng.choice(SIZES)))]:
        batches.append(synth_series(rng, k, n_runs, noise, sizes=sizes, min_before=25, min_gap=30,
                                    outlier_rate=outliers))
    res: dict[str, dict[str, float]] = {}
    for name, det in detectors(seed).items():
        n_groups = fp = truths = missed = noisy_alarms = 0
        t0 = time.perf_counter()
        count = 0
        for y, truth in batches:
            by_series: dict[int, list] = {}
            for t in truth:
                by_series.setdefault(t.series, []).append(t)
            for i in range(y.shape[0]):
                alerts = det(y[i])
                count += 1
                tr = by_series.get(i, [])
                if not truth and alerts:
                    noisy_alarms += 1
                for g in groups(alerts):
                    n_groups += 1
                    if not any(abs(a[0] - t.index) <= MATCH and a[1] * t.size > 0 for a in g for t in tr):
                        fp += 1
                for t in tr:
                    truths += 1
                    if not any(abs(a[0] - t.index) <= MATCH and a[1] * t.size > 0 for a in alerts):
                        missed += 1
        res[name] = {"noise_alarm_pct": 100.0 * noisy_alarms / max(k, 1),
                     "fp_groups_pct": 100.0 * fp / max(n_groups, 1), "missed_pct": 100.0 * missed / max(truths, 1),
                     "ms_per_series": 1000.0 * (time.perf_counter() - t0) / count}
    return res


def delays(seed: int, noise: float, n: int, outliers: float = 0.03, cap: int = 20) -> dict[str, list[int]]:
    rng = np.random.default_rng(seed + 1000)
    y, truth = synth_series(rng, n, 60 + cap, noise, sizes=(0.02,), min_before=40, min_gap=cap + 5,
                            outlier_rate=outliers)
    out: dict[str, list[int]] = {}
    for name, det in detectors(seed).items():
        ds = []
        for t in truth:
            d = cap + 1
            for m in range(1, cap + 1):
                if any(abs(c - t.index) <= MATCH and s > 0 for c, s in det(y[t.series, : t.index + m])):
                    d = m
                    break
            ds.append(d)
        out[name] = ds
    return out


def random_specs(rng: np.random.Generator) -> tuple[RolloutSpec, ...]:
    attrs = ["driver", "kernel", "nccl", "firmware", "cuda", "image"]
    rng.shuffle(attrs)
    effects = [0.02, -0.02, 0.03, -0.03, 0.05, 0.0, 0.0, 0.01]
    return tuple(RolloutSpec(a, float(rng.choice(effects)), float(rng.uniform(0.3, 1.0)),
                             float(rng.uniform(5, 45)), float(rng.uniform(2, 7))) for a in attrs[:5])


def naive(records, rollouts) -> dict[str, bool]:  # type: ignore[no-untyped-def]
    """Baseline: runs with the new version vs without, pooled over signatures (Welch t)."""
    out = {}
    for ro in rollouts:
        w = np.array([math.log(r.value) for r in records if ro.new in r.attrs.get(ro.attr, ())])
        wo = np.array([math.log(r.value) for r in records if ro.new not in r.attrs.get(ro.attr, ())])
        p = stats.ttest_ind(w, wo, equal_var=False).pvalue if w.size > 2 and wo.size > 2 else 1.0
        out[ro.attr] = bool(p < 0.01 / len(rollouts) and abs(math.expm1(w.mean() - wo.mean())) >= 0.005)
    return out


def attribution(seed: int, fleets: int) -> dict[str, dict[str, float]]:
    """Precision: flagged rollouts that really change speed (any non-zero effect) / flagged.
    Recall: flagged rollouts among those changing speed by >= 2 %. 1 % rollouts are real but below
    the goal: flagging them is correct, missing them is not counted."""
    rng = np.random.default_rng(seed + 7)
    counts = {"ours": [0, 0, 0, 0], "naive": [0, 0, 0, 0]}   # flagged real, flagged null, target found, targets
    errs: list[float] = []
    for i in range(fleets):
        f = synth_fleet(FleetConfig(seed=seed * 100 + i, rollouts=random_specs(rng), noise=0.02))
        effect = {r.attr: r.effect for r in f.rollouts}
        rolls = group_rollouts(f.changes)
        ours = {v.attr: v for v in attribute_rollouts(f.records, rolls)}
        for name, flag in (("ours", {a: v.cause for a, v in ours.items()}), ("naive", naive(f.records, rolls))):
            c = counts[name]
            for a, e in effect.items():
                got = flag.get(a, False)
                c[0] += got and e != 0
                c[1] += got and e == 0
                c[2] += got and abs(e) >= 0.02
                c[3] += abs(e) >= 0.02
        errs += [abs(v.effect.change - effect[a]) for a, v in ours.items() if v.effect and v.cause]
    out = {}
    for name, (real, null, found, targets) in counts.items():
        out[name] = {"precision": real / max(real + null, 1), "recall": found / max(targets, 1)}
    out["ours"]["median_abs_effect_error_pct"] = 100 * statistics.median(errs) if errs else float("nan")
    return out


def scale() -> int:
    """Time of each step on a large history (1,024 nodes, 400 signatures, ~100k runs)."""
    from minutiae.analyses.regress.detect import find_change_points
    from minutiae.analyses.regress.nodes import node_penalties
    from minutiae.analyses.whatchanged.attribution import whatchanged
    from minutiae.history.clean import clean_runs
    from minutiae.history.export import format_runs_csv
    from minutiae.history.parse import parse_runs_csv

    f = synth_fleet(FleetConfig(seed=1, nodes=1024, signatures=400, runs_per_signature=(150, 350),
                                nodes_per_run=(2, 4, 8, 16, 32)))
    text = format_runs_csv(f.records)
    steps: list[tuple[str, Callable[[], object]]] = []
    box: dict[str, object] = {}

    def parse() -> None:
        load = parse_runs_csv(text, "runs.csv")
        box["runs"], _ = clean_runs(load.records, columns=load.columns)

    steps.append(("parse + clean CSV", parse))
    steps.append(("change points, all signatures", lambda: find_change_points(box["runs"])))  # type: ignore[arg-type]
    steps.append(("node adjustment (slow nodes)", lambda: node_penalties(box["runs"])))  # type: ignore[arg-type]
    steps.append(("rollout attribution (4 rollouts)",
                  lambda: attribute_rollouts(box["runs"], group_rollouts(f.changes))))  # type: ignore[arg-type]
    rs = sorted(f.records, key=lambda r: r.time)
    steps.append(("whatchanged", lambda: whatchanged(f.records, rs[100].run_id, rs[-100].run_id)))
    print(f"scale: {len(f.records)} runs, 400 signatures, 1,024 nodes, {len(text) / 2**20:.0f} MiB CSV")
    for name, fn in steps:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        print(f"  {name:34} median {statistics.median(times):6.2f} s  [{min(times):.2f}–{max(times):.2f}]")
    return 0


def nodes(repeats: int) -> int:
    """Variance reduction: change points on node-adjusted series vs the measured ones, on fleets
    (128 nodes, 8 weeks, 1 % noise, about one code regression per signature) with 0, 4 or 8 slow
    nodes (+5 % from a random day on) and, last row, the default rollouts on top."""
    from minutiae.analyses.regress.detect import find_change_points, group_series
    from minutiae.analyses.regress.nodes import node_penalties

    def score(f: object, offsets: dict[str, float] | None) -> tuple[int, int, int]:
        cps = find_change_points(f.records, offsets=offsets)  # type: ignore[attr-defined]
        idx = {r.run_id: i for s in group_series(f.records).values() for i, r in enumerate(s)}  # type: ignore[attr-defined]
        truth = [(c.signature, idx[c.run_id], c.size) for c in f.code_changes]  # type: ignore[attr-defined]
        found = sum(any(cp.signature == s and abs(cp.index - i) <= 5 and cp.change * z > 0 for cp in cps)
                    for s, i, z in truth)
        false = sum(not any(cp.signature == s and abs(cp.index - i) <= 5 for s, i, _ in truth) for cp in cps)
        return found, len(truth), false

    print(f"node adjustment ({repeats} fleets per row; code regressions found / injected, change points "
          "near no code regression, pooled noise; summed over fleets)")
    for slow, rollouts in ((0, False), (4, False), (8, False), (2, True)):
        raw, adj, sig, secs = [0, 0, 0], [0, 0, 0], [0.0, 0.0], []
        flagged = right = true_slow = 0
        for seed in range(repeats):
            kw = {} if rollouts else {"rollouts": ()}
            f = synth_fleet(FleetConfig(seed=seed, slow_nodes=slow, slow_node_effect=0.05, noise=0.01,
                                        code_regression_rate=1.0, **kw))  # type: ignore[arg-type]
            t0 = time.perf_counter()
            a = node_penalties(f.records)
            secs.append(time.perf_counter() - t0)
            for tot, off in ((raw, None), (adj, a.penalty)):
                for i, v in enumerate(score(f, off)):
                    tot[i] += v
            sig[0] += a.sigma_before / repeats
            sig[1] += a.sigma_after / repeats
            flagged += len(a.slow_nodes)
            right += len(set(a.slow_nodes) & set(f.slow_nodes))
            true_slow += len(f.slow_nodes)
        print(f"  {slow} slow nodes{' + rollouts' if rollouts else ''}: measured {raw[0]}/{raw[1]} found, "
              f"{raw[2]} false; node-adjusted {adj[0]}/{adj[1]} found, {adj[2]} false; noise "
              f"{sig[0]:.2%} -> {sig[1]:.2%}; slow nodes flagged {flagged} ({right} of {true_slow} true); "
              f"{statistics.median(secs) * 1000:.0f} ms per fleet")
    return 0


def ratio(a: list[float], b: list[float]) -> str:
    x, y = statistics.median(a), statistics.median(b)
    return f"{x / y:.2f}x" if y > 0 else ("=" if x == 0 else "n/a (baseline 0)")


def med(vals: list[float]) -> str:
    return f"{statistics.median(vals):6.2f} [{min(vals):.2f}–{max(vals):.2f}]"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--part", choices=("all", "detection", "attribution", "scale", "nodes"), default="all")
    a = ap.parse_args()
    n_series, n_delay, fleets = (60, 15, 3) if a.quick else (120, 30, 6)
    if a.part == "scale":
        return scale()
    if a.part == "nodes":
        return nodes(4 * a.repeats)
    names = ("ours", "pelt", "edivisive", "mozilla")
    print(f"regress bench: {a.repeats} repeats; {n_series} series x 120 runs per noise level "
          f"(1/3 no change, 1/3 one, 1/3 two shifts of {', '.join(f'{s:+.0%}' for s in SIZES)}); "
          "outlier runs +5..30 %; median [min–max] over repeats")
    conditions = ((0.005, 0.03), (0.01, 0.03), (0.02, 0.03), (0.01, 0.0)) if a.part != "attribution" else ()
    for noise, outliers in conditions:
        rows: dict[str, dict[str, list[float]]] = {n: {} for n in names}
        dl: dict[str, list[int]] = {n: [] for n in names}
        for rep in range(a.repeats):
            for n, v in offline(rep, noise, n_series, outliers).items():
                for k, x in v.items():
                    rows[n].setdefault(k, []).append(x)
            for n, ds in delays(rep, noise, n_delay, outliers).items():
                dl[n] += ds
        print(f"\nrun-to-run noise {noise:.1%}, outlier runs {outliers:.0%}")
        print(f"{'detector':10} {'alarms on pure noise %':>23} {'FP alert groups %':>23} {'missed %':>23} "
              f"{'2% delay (median)':>18} {'<=5 runs %':>11} {'ms/series':>22}")
        for n in names:
            d = np.array(dl[n])
            print(f"{n:10} {med(rows[n]['noise_alarm_pct']):>23} {med(rows[n]['fp_groups_pct']):>23} "
                  f"{med(rows[n]['missed_pct']):>23} {float(np.median(d)):>18.1f} "
                  f"{100 * float(np.mean(d <= 5)):>11.0f} {med(rows[n]['ms_per_series']):>22}")
        for base in ("pelt", "edivisive", "mozilla"):
            print(f"  ours vs {base}: " + ", ".join(
                f"{k} {ratio(rows['ours'][k], rows[base][k])}" for k in ("fp_groups_pct", "missed_pct", "ms_per_series"))
                + f", delay {ratio([float(np.median(dl['ours']))], [float(np.median(dl[base]))])}")
    if a.part == "detection":
        return 0
    print(f"\nrollout attribution ({fleets} fleets x {a.repeats} repeats, 128 nodes, 8 weeks, noise 2 %, "
          "5 random rollouts each of +-2/3/5 %, 1 % or none;\n  precision = flagged that really change speed / flagged, recall = flagged among |effect| >= 2 %)")
    att: dict[str, dict[str, list[float]]] = {}
    t0 = time.perf_counter()
    for rep in range(a.repeats):
        for n, v in attribution(rep, fleets).items():
            for k, x in v.items():
                att.setdefault(n, {}).setdefault(k, []).append(x)
    for n, v in att.items():
        print(f"  {n:6} " + "  ".join(f"{k} {med(x)}" for k, x in v.items()))
    print(f"  ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

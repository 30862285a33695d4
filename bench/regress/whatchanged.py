"""whatchanged: is the true cause ranked first? On synthetic fleets (bench/regress/run.py's
random rollouts, 2 % noise, slow nodes, code changes), for every rollout of |effect| >= 4 %
(2x the noise) and each signature that ran both before and after it: A = the signature's last run
without the new version, B = its first run with it (null rollouts and healthy nodes differ too;
pairs where another real rollout or a slow node also differs are skipped: they have two causes).
The true cause is the rollout's attribute; figures for pairs whose observed change is >= 2x the
noise and for all pairs. Side by side in one process: ours vs a naive ranking
(difference of mean log step time with/without B's side, pooled over signatures).

    .venv/bin/python bench/regress/whatchanged.py [--fleets 6] [--per-rollout 4] [--seed-base 500]

(``--seed-base``: fleet i has seed seed-base + i; 500 gave the figures in docs/regress.md, any
other base is a held-out check.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from minutiae.analyses.whatchanged.attribution import whatchanged  # noqa: E402
from minutiae.testing.synth.regress import FleetConfig, RolloutSpec, synth_fleet  # noqa: E402


def specs(rng: np.random.Generator) -> tuple[RolloutSpec, ...]:
    attrs = ["driver", "kernel", "nccl", "firmware", "cuda", "image"]
    rng.shuffle(attrs)
    eff = [0.04, -0.04, 0.05, -0.05, 0.06, 0.0, 0.0, 0.02, -0.02]
    return tuple(RolloutSpec(a, float(rng.choice(eff)), float(rng.uniform(0.3, 1.0)),
                             float(rng.uniform(5, 45)), float(rng.uniform(2, 7))) for a in attrs[:5])


def naive_top(runs, a, b) -> str:  # type: ignore[no-untyped-def]
    best, key = 0.0, ""
    for k in sorted(set(a.attrs) | set(b.attrs)):
        new = b.attrs.get(k, frozenset()) - a.attrs.get(k, frozenset())
        if not new:
            continue
        w = [np.log(r.value) for r in runs if new & r.attrs.get(k, frozenset())]
        wo = [np.log(r.value) for r in runs if not new & r.attrs.get(k, frozenset())]
        if len(w) > 2 and len(wo) > 2 and abs(np.mean(w) - np.mean(wo)) > best:
            best, key = abs(float(np.mean(w) - np.mean(wo))), k
    return key


def _single_cause(f, ro, ra, rb) -> bool:  # type: ignore[no-untyped-def]
    """Only the rollout's attribute is a real cause of the A -> B change: no other rollout with an
    effect differs between the two runs, and no slow node is on one run and not the other."""
    for other in f.rollouts:
        if other.attr != ro.attr and other.effect != 0 and (
                ra.attrs.get(other.attr) != rb.attrs.get(other.attr)):
            return False
    return not (set(f.slow_nodes) & (set(ra.nodes) ^ set(rb.nodes)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleets", type=int, default=6)
    ap.add_argument("--per-rollout", type=int, default=4)
    ap.add_argument("--seed-base", type=int, default=500)
    a = ap.parse_args()
    load0 = os.getloadavg()[0]
    counts = {"all": [0, 0, 0], "big": [0, 0, 0]}   # pairs, ours first, naive first
    total = dup = silent = skipped = 0
    secs = []
    for i in range(a.fleets):
        rng = np.random.default_rng(a.seed_base + i)
        f = synth_fleet(FleetConfig(seed=a.seed_base + i, rollouts=specs(rng), noise=0.02))
        runs = sorted(f.records, key=lambda r: r.time)
        for ro in f.rollouts:
            if abs(ro.effect) < 0.04:
                continue
            done = 0
            for sig in sorted({r.signature for r in runs}):
                series = [r for r in runs if r.signature == sig]
                before = [r for r in series if ro.new not in r.attrs.get(ro.attr, ())
                          and r.attrs.get(ro.attr)]
                if ro.effect > 0:
                    after = [r for r in series if ro.new in r.attrs.get(ro.attr, ())]
                else:
                    after = [r for r in series if r.attrs.get(ro.attr) == {ro.new}]
                after = [r for r in after if before and r.time > before[0].time]
                if not before or not after:
                    continue
                ra = [r for r in before if r.time < after[0].time][-1]
                rb = after[0]
                if not _single_cause(f, ro, ra, rb):
                    skipped += 1
                    continue
                t0 = time.perf_counter()
                w = whatchanged(f.records, ra.run_id, rb.run_id)
                secs.append(time.perf_counter() - t0)
                top = w.differences[0] if w.differences else None
                big = w.noise is not None and abs(w.change) >= 2 * w.noise
                for part, on in (("all", True), ("big", big)):
                    if on:
                        counts[part][0] += 1
                        counts[part][1] += top is not None and top.key == ro.attr
                        counts[part][2] += naive_top(f.records, ra, rb) == ro.attr
                total += 1
                keys = [(d.kind, d.key) for d in w.differences]
                dup += len(keys) != len(set(keys))
                silent += bool(w.note)
                done += 1
                if done >= a.per_rollout:
                    break
    load1 = os.getloadavg()[0]
    print(f"whatchanged on {total} run pairs across a rollout of |effect| >= 4 % ({a.fleets} "
          f"fleets, seeds {a.seed_base}+i), load {load0:.1f}-{load1:.1f}, median {statistics.median(secs):.2f} s per call")
    for part, label in (("big", "observed change >= 2x noise"), ("all", "every pair")):
        n, ours, naive = counts[part]
        print(f"  {label:28} n={n:3}: true cause first: ours {ours / max(n, 1):.1%}, "
              f"naive {naive / max(n, 1):.1%}")
    print(f"  ours: candidates listed twice in {dup} reports; 'nothing significant' said in "
          f"{silent}; {skipped} pairs skipped (another real cause differed too)")


if __name__ == "__main__":
    main()

"""Rollouts that hit only some models: attribution precision/recall by share of signatures hit.

Synthetic fleets (``minutiae.testing.synth.regress``, 128 nodes, 8 weeks, 2 % noise, slow nodes
and per-signature code changes as in bench/regress/run.py) whose 30 signatures belong to 4
model families (``moe-``, ``gpt-``, ``llama-``, ``vit-``); one NCCL rollout changes step time
by +-2/3/5 % only on runs of 1, 2, 3 or 4 families (25-100 % of the signatures) that met it
(any node for a slowdown, all for a speed-up); 4 other rollouts (fleet-wide +-2/3/5 %, or 0);
some fleets with 5 % of version fields emptied. Side by side in one process: the fleet-wide
attribution alone (``groups`` ignored: what ``regress`` said before) and with the group split.
Precision = causes that are real / causes; recall = real causes (|effect| >= 2 %) found.

    .venv/bin/python bench/regress/partial.py [--fleets 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from minutiae.analyses.whatchanged.rollouts import attribute_rollouts  # noqa: E402
from minutiae.history.record import RunRecord  # noqa: E402
from minutiae.history.rollouts import group_rollouts  # noqa: E402
from minutiae.testing.synth.regress import (  # noqa: E402
    NEW_VERSIONS,
    FleetConfig,
    RolloutSpec,
    synth_fleet,
)

FAMILIES = ("moe", "gpt", "llama", "vit")
OTHER = ("driver", "kernel", "firmware", "image")


def fleet(seed: int, hit_families: int, effect: float, empty: float) -> tuple[list[RunRecord], list, dict[str, float], set[str]]:  # type: ignore[type-arg]
    rng = np.random.default_rng(seed)
    specs = [RolloutSpec("nccl", 0.0, float(rng.uniform(0.5, 1.0)), float(rng.uniform(10, 40)), 3.0)]
    effects = {"nccl": effect}
    for a in OTHER:
        e = float(rng.choice([0.02, -0.02, 0.03, -0.03, 0.05, 0.0, 0.0, 0.0]))
        effects[a] = e
        specs.append(RolloutSpec(a, e, float(rng.uniform(0.3, 1.0)), float(rng.uniform(5, 45)),
                                 float(rng.uniform(2, 7))))
    f = synth_fleet(FleetConfig(seed=seed, rollouts=tuple(specs), noise=0.02,
                                missing_version_rate=empty))
    sigs = sorted({r.signature for r in f.records})
    fam = {s: FAMILIES[i % 4] for i, s in enumerate(sigs)}
    hit = set(FAMILIES[:hit_families])
    new = NEW_VERSIONS["nccl"]
    out, hit_sigs = [], set()
    for r in f.records:
        name = f"{fam[r.signature]}-{r.signature}"
        v = r.value
        versions = r.attrs.get("nccl", frozenset())
        met = (new in versions) if effect > 0 else (versions == {new})
        if fam[r.signature] in hit and met:
            v = v * (1.0 + effect) if r.metric.higher_is_slower else v / (1.0 + effect)
            hit_sigs.add(name)
        out.append(dataclasses.replace(r, signature=name, value=v))
    return out, group_rollouts(f.changes), effects, hit_sigs


def _fleet_wide(v) -> bool:  # type: ignore[no-untyped-def]
    """The verdict without the group split (what attribution said before it)."""
    e = v.effect
    return bool(e is not None and e.p_value < 0.01 / 5 and abs(e.change) >= 0.005 and v.overlap >= 20)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleets", type=int, default=8)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    load0 = os.getloadavg()[0]
    rows = []
    secs: list[float] = []
    for share in (1, 2, 3, 4):
        # [flagged real, flagged null, found (|e| >= 2 %), targets] for NCCL / the other rollouts
        c = {m: {"nccl": [0, 0, 0, 0], "other": [0, 0, 0, 0]} for m in ("fleet-wide", "split")}
        sig = [0, 0, 0]
        for i in range(a.fleets):
            rng = np.random.default_rng(1000 * share + i)
            effect = float(rng.choice([0.02, 0.03, 0.05, -0.03, -0.02]))
            runs, rolls, effects, truth_sigs = fleet(1000 * share + i, share, effect,
                                                     0.05 if i % 2 else 0.0)
            t0 = time.perf_counter()
            verdicts = {v.attr: v for v in attribute_rollouts(runs, rolls)}
            secs.append(time.perf_counter() - t0)
            for m in c:
                for attr, e in effects.items():
                    v = verdicts[attr]
                    got = v.cause if m == "split" else _fleet_wide(v)
                    k = c[m]["nccl" if attr == "nccl" else "other"]
                    k[0] += got and e != 0
                    k[1] += got and e == 0
                    k[2] += got and abs(e) >= 0.02
                    k[3] += abs(e) >= 0.02
            for attr, e in effects.items():
                v = verdicts[attr]
                if a.verbose and attr != "nccl" and v.cause and e == 0:
                    print(f"  false cause: share {share} fleet {i} {attr}: {v.summary()}")
            nv = verdicts["nccl"]
            if a.verbose and not nv.cause:
                print(f"  miss: share {share} fleet {i} effect {effect:+.2f}: {nv.summary()} "
                      f"p={nv.effect.p_value if nv.effect else None} groups={nv.groups}")
            if share < 4 and nv.cause and nv.groups is not None:
                said = set(nv.groups.hit_signatures)
                sig[0] += len(said & truth_sigs)
                sig[1] += len(said - truth_sigs)
            if share < 4:
                sig[2] += len(truth_sigs - (set(nv.groups.hit_signatures)
                                             if nv.cause and nv.groups else set()))
        for m, parts in c.items():
            for part, (real, null, found, targets) in parts.items():
                rows.append((f"{25 * share} %", f"{m}: {part}", real / max(real + null, 1),
                             found / max(targets, 1)))
        if share < 4:
            rows.append((f"{25 * share} %", "split: NCCL signatures named",
                         sig[0] / max(sig[0] + sig[1], 1), sig[0] / max(sig[0] + sig[2], 1)))
    load1 = os.getloadavg()[0]
    print(f"partial rollouts: {a.fleets} fleets per share, load {load0:.1f}-{load1:.1f}, "
          f"attribution median {statistics.median(secs):.2f} s per fleet")
    print(f"{'hit share':>10} {'method: rollouts':34} {'precision':>9} {'recall':>7}")
    for share, name, p, r in rows:
        print(f"{share:>10} {name:34} {p:9.3f} {r:7.3f}")


if __name__ == "__main__":
    main()

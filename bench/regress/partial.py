"""Rollouts that hit only some models: attribution precision/recall by share of signatures hit.

Synthetic fleets (``minutiae.testing.synth.regress``, 128 nodes, 8 weeks, 2 % noise, slow nodes
and per-signature code changes as in bench/regress/run.py) whose 30 signatures belong to 4
model families (``moe-``, ``gpt-``, ``llama-``, ``vit-``); one NCCL rollout changes step time
by +-2/3/5 % only on runs of 1, 2, 3 or 4 families (25-100 % of the signatures) that met it
(any node for a slowdown, all for a speed-up); 4 other rollouts (fleet-wide +-2/3/5 %, or 0);
some fleets with 5 % of version fields emptied. Side by side in one process: the fleet-wide
attribution alone (``groups`` ignored: what ``regress`` said before) and with the group split.
Precision = causes that are real / causes; recall = real causes (|effect| >= 2 %) found.

``oracle``: the same fleets fitted with the truth given (each rollout's exposure by its
mechanism, the NCCL rollout's hit signatures as one column, the rest as another, the other
rollouts fleet-wide): the share of NCCL rollouts whose effect that fit shows at the verdict's
level (two-sided p < ``RULE.alpha`` / 5 rollouts). A method that must also find which signatures were hit
cannot do better: that is the recall ceiling of the data, not of the method.

    .venv/bin/python bench/regress/partial.py [--fleets 8] [--seed-base 1000]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from minutiae.analyses.whatchanged.rule import RULE  # noqa: E402
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


def fleet(seed: int, hit_families: int, effect: float, empty: float,  # type: ignore[type-arg]
          runs: tuple[int, int] = (40, 120)) -> tuple[list[RunRecord], list, dict[str, float], set[str]]:
    return fleet_truth(seed, hit_families, effect, empty, runs)[:4]  # type: ignore[return-value]


def fleet_truth(seed: int, hit_families: int, effect: float, empty: float,
                runs: tuple[int, int] = (40, 120)) -> tuple[Any, ...]:
    """``fleet``'s four values and the generator's ``SynthFleet`` (its truth: code changes, slow
    nodes), for bench/regress/confound.py."""
    rng = np.random.default_rng(seed)
    specs = [RolloutSpec("nccl", 0.0, float(rng.uniform(0.5, 1.0)), float(rng.uniform(10, 40)), 3.0)]
    effects = {"nccl": effect}
    for a in OTHER:
        e = float(rng.choice([0.02, -0.02, 0.03, -0.03, 0.05, 0.0, 0.0, 0.0]))
        effects[a] = e
        specs.append(RolloutSpec(a, e, float(rng.uniform(0.3, 1.0)), float(rng.uniform(5, 45)),
                                 float(rng.uniform(2, 7))))
    f = synth_fleet(FleetConfig(seed=seed, rollouts=tuple(specs), noise=0.02, runs_per_signature=runs,
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
    return out, group_rollouts(f.changes), effects, hit_sigs, f


def oracle_p(runs: list[RunRecord], rolls: list, effects: dict[str, float],  # type: ignore[type-arg]
             hit_sigs: set[str]) -> float:
    """p of the NCCL effect on its hit signatures when the truth is given (see the module doc)."""
    from minutiae.analyses.whatchanged.rollouts import _exposures, _node_penalty
    from minutiae.analyses.whatchanged.stats import fe_joint, make_panel

    panel = make_panel(runs)
    anys, alls, missing = _exposures(panel, rolls)
    chosen = [alls[k] if effects[ro.attr] < 0 else anys[k] for k, ro in enumerate(rolls)]
    i = next(k for k, ro in enumerate(rolls) if ro.attr == "nccl")
    hit = np.isin(np.array([r.signature for r in panel.runs]), sorted(hit_sigs))
    cols = [c for k, c in enumerate(chosen) if k != i] + [m for m in missing if m.any()]
    fit = fe_joint(panel, np.column_stack([*cols, _node_penalty(panel), chosen[i] * hit,
                                           chosen[i] * ~hit]))
    e = fit[-2]
    return 1.0 if e is None else e.p_value


def _fleet_wide(v) -> bool:  # type: ignore[no-untyped-def]
    """The verdict without the group split (what attribution said before it), at today's rule."""
    return RULE.fleet_cause(v.effect, v.overlap, 5)


def _previous(commit: str) -> Any:
    """``split_rollout`` of ``groups.py`` at ``commit`` (loaded from git), to run beside ours."""
    import importlib.util
    import subprocess
    import tempfile

    text = subprocess.run(["git", "show", f"{commit}:src/minutiae/analyses/whatchanged/groups.py"],
                          cwd=ROOT, check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "groups_previous.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("groups_previous", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    from minutiae.analyses.whatchanged.groups import GroupSplit

    def split(*args: Any) -> Any:  # its verdict in today's GroupSplit (fields it lacks: defaults)
        sp = mod.split_rollout(*args)
        return None if sp is None else GroupSplit(**{f.name: getattr(sp, f.name)
                                                      for f in dataclasses.fields(sp)})
    return split


def _verdicts(runs: list[RunRecord], rolls: list[Any], split: Any) -> dict[str, Any]:
    from minutiae.analyses.whatchanged import rollouts

    keep = rollouts.split_rollout
    rollouts.split_rollout = split or keep
    try:
        return {v.attr: v for v in rollouts.attribute_rollouts(runs, rolls)}
    finally:
        rollouts.split_rollout = keep


def _count(c: dict[str, list[int]], verdicts: dict[str, Any], effects: dict[str, float],
           method: str) -> None:
    for attr, e in effects.items():
        v = verdicts[attr]
        got = _fleet_wide(v) if method == "fleet-wide" else v.cause
        k = c["nccl" if attr == "nccl" else "other"]
        k[0] += got and e != 0
        k[1] += got and e == 0
        k[2] += got and abs(e) >= 0.02
        k[3] += abs(e) >= 0.02


def _named(sig: list[int], nv: Any, truth_sigs: set[str]) -> None:
    said = set(nv.groups.hit_signatures) if nv.cause and nv.groups is not None else set()
    sig[0] += len(said & truth_sigs)
    sig[1] += len(said - truth_sigs)
    sig[2] += len(truth_sigs - said)


def _say(share: int, i: int, effect: float, verdicts: dict[str, Any], effects: dict[str, float],
         method: str) -> None:
    for attr, e in effects.items():
        v = verdicts[attr]
        if attr != "nccl" and v.cause and e == 0:
            print(f"  {method} false cause: share {share} fleet {i} {attr}: {v.summary()}")
    nv = verdicts["nccl"]
    if not nv.cause:
        print(f"  {method} miss: share {share} fleet {i} effect {effect:+.2f}: {nv.summary()} "
              f"p={nv.effect.p_value if nv.effect else None}")


def _share(share: int, a: argparse.Namespace, previous: Any, secs: list[float]
           ) -> list[tuple[str, str, float, float]]:
    methods = ["fleet-wide", "split", *(["previous split"] if previous else [])]
    # [flagged real, flagged null, found (|e| >= 2 %), targets] for NCCL / the other rollouts
    c = {m: {"nccl": [0, 0, 0, 0], "other": [0, 0, 0, 0]} for m in methods}
    sig = {m: [0, 0, 0] for m in methods[1:]}
    ceiling = 0
    for i in range(a.fleets):
        seed = a.seed_base * share + i
        effect = float(np.random.default_rng(seed).choice([0.02, 0.03, 0.05, -0.03, -0.02]))
        runs, rolls, effects, truth_sigs = fleet(seed, share, effect, 0.05 if i % 2 else 0.0)
        ceiling += oracle_p(runs, rolls, effects, truth_sigs) < RULE.alpha / len(effects)
        for m in methods[1:]:
            t0 = time.perf_counter()
            verdicts = _verdicts(runs, rolls, previous if m == "previous split" else None)
            if m == "split":
                secs.append(time.perf_counter() - t0)
                _count(c["fleet-wide"], verdicts, effects, "fleet-wide")
            _count(c[m], verdicts, effects, m)
            if share < 4:
                _named(sig[m], verdicts["nccl"], truth_sigs)
            if a.verbose:
                _say(share, i, effect, verdicts, effects, m)
    label = f"{25 * share} %"
    rows = []
    for m, parts in c.items():
        for part, (real, null, found, targets) in parts.items():
            rows.append((label, f"{m}: {part}", real / max(real + null, 1), found / max(targets, 1)))
        tot = [sum(v[k] for v in parts.values()) for k in range(4)]
        rows.append((label, f"{m}: all rollouts", tot[0] / max(tot[0] + tot[1], 1),
                     tot[2] / max(tot[3], 1)))
    for m, (right, wrong, missed) in sig.items():
        if share < 4:
            rows.append((label, f"{m}: NCCL signatures named", right / max(right + wrong, 1),
                         right / max(right + missed, 1)))
    rows.append((label, "oracle: nccl (recall ceiling)", float("nan"), ceiling / a.fleets))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleets", type=int, default=8)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--seed-base", type=int, default=1000,
                    help="fleet seeds are seed-base x share + i (1000: the figures in the docs)")
    ap.add_argument("--previous", default="",
                    help="also run groups.py of this commit (e.g. 00bb5c9) on the same fleets")
    a = ap.parse_args()
    previous = _previous(a.previous) if a.previous else None
    load0 = os.getloadavg()[0]
    secs: list[float] = []
    rows = [row for share in (1, 2, 3, 4) for row in _share(share, a, previous, secs)]
    load1 = os.getloadavg()[0]
    print(f"partial rollouts: {a.fleets} fleets per share, seeds {a.seed_base} x share + i, load "
          f"{load0:.1f}-{load1:.1f}, attribution median {statistics.median(secs):.2f} s per fleet")
    print(f"{'hit share':>10} {'method: rollouts':40} {'precision':>9} {'recall':>7}")
    for share_s, name, p, r in rows:
        print(f"{share_s:>10} {name:40} {p:9.3f} {r:7.3f}")


if __name__ == "__main__":
    main()

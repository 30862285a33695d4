"""Rollout attribution on fleets from an independent generator: does P/R rest on the bench's own?

Written apart from ``minutiae.testing.synth.regress`` (not imported) with other choices where
``bench/regress/partial.py`` has one, and the confounding real fleets have:

- nodes in racks of 8; a job takes a *contiguous* block of nodes (a topology-aware scheduler),
  so its nodes share racks; rollouts go out *rack by rack* over 2-6 days, in working hours
  (09-17 UTC), so exposure follows the rack order and the time of day;
- 24 signatures in 3 families (``moe-``, ``dense-``, ``vit-``) of 1, 2, 4 or 8 nodes, from 15 to
  200 runs each over 6 weeks (busy and rare models), runs mostly in working hours;
- run noise Student-t (4 dof) scaled to 1.5 %, a fleet-wide daily cycle of +-1 % and a slow
  week for the whole fleet (+1.5 %, a storage incident);
- per signature 0-2 own code changes (+-1..4 %) at random times, and in a third of the fleets
  one hit family changes its code (+-2 %) within 3 days of the NCCL rollout (teams move to the
  new NCCL with their code): the confounder that is not in any field;
- one node degrades (+6 %) from a random day on, and another is flaky (+10 % on a fifth of its
  runs);
- a partial NCCL rollout of +-2/3/5 % on 1-3 families (of the runs that met it: any node for a
  slowdown, all for a speed-up) and 3 other rollouts (driver, kernel, firmware) of 0, +-2 or
  +-3 % fleet-wide, two of them overlapping the NCCL rollout in time.

Scored at ``RULE`` like partial.py: P = causes that are real / causes over all rollouts;
R = real rollouts of |effect| >= 2 % found (NCCL, and all).

    .venv/bin/python bench/regress/indep.py [--fleets 40] [--seed-base 0]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from minutiae.analyses.whatchanged.rollouts import attribute_rollouts  # noqa: E402
from minutiae.history.record import RunRecord  # noqa: E402
from minutiae.history.rollouts import NodeChange, Rollout, group_rollouts  # noqa: E402

DAY = 86400.0
T0 = 1_780_000_000.0
RACK = 8
NODES = 96
DAYS = 42
FAMILIES = ("moe", "dense", "vit")
OLD = {"nccl": "2.20.3", "driver": "550.90.07", "kernel": "6.5.0-41", "firmware": "1.2.0"}
NEW = {"nccl": "2.22.3", "driver": "560.35.03", "kernel": "6.5.0-45", "firmware": "1.3.1"}


#: what can be switched off (``--without``) to see which confounder costs what
PARTS = ("diurnal", "storage", "code", "concurrent", "slow", "flaky", "tails")


@dataclass(frozen=True, slots=True)
class Fleet:
    runs: list[RunRecord]
    rollouts: list[Rollout]
    effects: dict[str, float]
    share: int


def _work_hours(rng: np.random.Generator, day: np.ndarray) -> np.ndarray:
    return day * DAY + rng.uniform(9, 17, day.shape) * 3600.0


def _rollout_times(rng: np.random.Generator, start: float, days: float, cover: float) -> np.ndarray:
    """Per node the time it got the new version (inf: never): rack by rack in a random rack
    order, in working hours, over ``days`` from ``start``; ``cover`` of the racks."""
    racks = rng.permutation(NODES // RACK)[: max(1, round(cover * NODES / RACK))]
    at = np.full(NODES, np.inf)
    day = start + np.sort(rng.uniform(0, days, racks.size))
    for rk, d in zip(racks, day, strict=True):
        at[rk * RACK:(rk + 1) * RACK] = T0 + _work_hours(rng, np.array([math.floor(d)]))[0] + \
            rng.uniform(0, 3600.0, RACK)
    return at


def fleet(seed: int, without: frozenset[str] = frozenset(), record_code: bool = False) -> Fleet:
    """``record_code``: every run also records its code version (``code_version``: how many of
    its signature's code changes it came after), as a history that logs a commit would."""
    rng = np.random.default_rng(seed)
    share = int(rng.integers(1, 4))
    eff_nccl = float(rng.choice([0.02, -0.02, 0.03, -0.03, 0.05]))
    t_nccl = float(rng.uniform(12, 30))
    times = {"nccl": _rollout_times(rng, t_nccl, float(rng.uniform(2, 6)), float(rng.uniform(0.5, 1)))}
    effects = {"nccl": eff_nccl}
    for k, a in enumerate(("driver", "kernel", "firmware")):
        effects[a] = float(rng.choice([0.0, 0.0, 0.02, -0.02, 0.03, -0.03]))
        start = t_nccl + rng.uniform(-3, 3) if k < 2 else float(rng.uniform(5, 35))
        times[a] = _rollout_times(rng, start, float(rng.uniform(2, 6)), float(rng.uniform(0.4, 1)))
    hit_fams = set(rng.choice(FAMILIES, share, replace=False).tolist())
    runs = _runs(rng, times, effects, hit_fams, t_nccl, without, record_code)
    changes = [NodeChange(float(t), f"n{i:03d}", a, OLD[a], NEW[a])
               for a, at in times.items() for i, t in enumerate(at) if np.isfinite(t)]
    return Fleet(runs, group_rollouts(sorted(changes, key=lambda c: c.time)), effects, share)


def _runs(rng: np.random.Generator, times: dict[str, np.ndarray], effects: dict[str, float],
          hit_fams: set[str], t_nccl: float, without: frozenset[str], record_code: bool,
          ) -> list[RunRecord]:
    use = {p: float(p not in without) for p in PARTS}
    slow, flaky = rng.choice(NODES, 2, replace=False)
    slow_from = T0 + rng.uniform(5, 35) * DAY
    storage = T0 + rng.uniform(0, DAYS - 7) * DAY
    concurrent = (rng.choice(sorted(hit_fams)), t_nccl + rng.uniform(-3, 3),
                  float(rng.choice([0.02, -0.02]))) if rng.random() < 1 / 3 else None
    out: list[RunRecord] = []
    for s in range(24):
        fam = FAMILIES[s % 3]
        width = int(rng.choice([1, 2, 4, 8]))
        n = int(rng.integers(15, 201))
        t = np.sort(T0 + np.where(rng.random(n) < 0.7, _work_hours(rng, rng.integers(0, DAYS, n)),
                                  rng.uniform(0, DAYS * DAY, n)))
        code = [(T0 + rng.uniform(3, DAYS - 3) * DAY, float(rng.uniform(0.01, 0.04) * rng.choice([-1, 1])))
                for _ in range(int(rng.integers(0, 3)))]
        if concurrent is not None and concurrent[0] == fam:
            code.append((T0 + concurrent[1] * DAY, concurrent[2]))
        base = math.log(rng.uniform(0.3, 5.0))
        for j in range(n):
            first = int(rng.integers(0, NODES - width + 1))
            nodes = np.arange(first, first + width)
            tail, gauss = float(rng.standard_t(4)) / math.sqrt(2.0), float(rng.normal())
            y = base + 0.015 * (tail if use["tails"] else gauss)
            y += use["diurnal"] * 0.01 * math.sin(2 * math.pi * (t[j] % DAY) / DAY)
            y += use["storage"] * math.log1p(0.015) * (storage <= t[j] < storage + 7 * DAY)
            y += sum(math.log1p(c) * (use["concurrent"] if k == len(code) - 1 and concurrent
                                      is not None and concurrent[0] == fam else use["code"])
                     for k, (at, c) in enumerate(code) if t[j] >= at)
            y += use["slow"] * math.log1p(0.06) * (slow in nodes and t[j] >= slow_from)
            y += use["flaky"] * math.log1p(0.10) * (flaky in nodes and rng.random() < 0.2)
            attrs = {"code_version": frozenset({f"v{sum(t[j] >= at for at, _ in code)}"})} \
                if record_code else {}
            for a, at in times.items():
                on = at[nodes] <= t[j]
                e = effects[a]
                if (on.any() if e > 0 else on.all()) and (a != "nccl" or fam in hit_fams):
                    y += math.log1p(e)
                attrs[a] = frozenset({NEW[a]} if on.all() else {OLD[a]} if not on.any()
                                     else {OLD[a], NEW[a]})
            out.append(RunRecord(f"{fam}-{s:02d}-{j:04d}", float(t[j]), f"{fam}-m{s:02d}-w{width}",
                                 math.exp(y), nodes=tuple(f"n{i:03d}" for i in nodes),
                                 attrs=attrs, gpus=8 * width, duration_s=3600.0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleets", type=int, default=40)
    ap.add_argument("--seed-base", type=int, default=0)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--record-code", action="store_true", help="runs record their code version")
    ap.add_argument("--without", default="", help=f"comma list of {', '.join(PARTS)}")
    a = ap.parse_args()
    without = frozenset(w for w in a.without.split(",") if w)
    if without - set(PARTS):
        raise SystemExit(f"--without: unknown {sorted(without - set(PARTS))}")
    load0, c0, w0 = os.getloadavg()[0], time.process_time(), time.perf_counter()
    # per share: [flagged real, flagged null, NCCL found, NCCL, >= 2 % found, >= 2 %]
    tally = {s: [0] * 6 for s in (1, 2, 3)}
    for i in range(a.fleets):
        f = fleet(a.seed_base + i, without, a.record_code)
        k = tally[f.share]
        for v in attribute_rollouts(f.runs, f.rollouts):
            e = f.effects[v.attr]
            k[0] += v.cause and e != 0
            k[1] += v.cause and e == 0
            k[2] += v.attr == "nccl" and v.cause
            k[3] += v.attr == "nccl"
            k[4] += v.cause and abs(e) >= 0.02
            k[5] += abs(e) >= 0.02
            if a.verbose and v.cause != (e != 0):
                print(f"  seed {a.seed_base + i} share {f.share} {v.attr} {e:+.2f}: "
                      f"{'false cause' if v.cause else 'miss'}: {v.summary()}")
    print(f"independent fleets: {a.fleets} (seeds {a.seed_base}+i), without "
          f"{','.join(sorted(without)) or 'nothing'}"
          f"{', code versions recorded' if a.record_code else ''}, load {load0:.1f}-"
          f"{os.getloadavg()[0]:.1f}, {time.process_time() - c0:.0f} s CPU, "
          f"{time.perf_counter() - w0:.0f} s wall")
    print(f"{'families hit':>12} {'fleets':>6} {'P (all)':>8} {'R NCCL':>9} {'R all >= 2 %':>13}")
    tot = [sum(v[j] for v in tally.values()) for j in range(6)]
    for name, k in [*((f"{s} of 3", v) for s, v in tally.items()), ("all", tot)]:
        print(f"{name:>12} {k[3]:6d} {k[0] / max(k[0] + k[1], 1):8.3f} {k[2]:4d}/{k[3]:<4d} "
              f"{k[4]:6d}/{k[5]:<6d}")


if __name__ == "__main__":
    main()

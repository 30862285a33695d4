"""Synthetic run histories with known truth (vectorised numpy), for tests and bench/regress.

Two generators:

- :func:`synth_series`: bare log-step-time series with injected level shifts, Gaussian run-to-run
  noise of ``noise`` (fraction) and one-sided outlier runs (a straggler node in that run):
  for detection delay, false alarms and misses.
- :func:`synth_fleet`: a fleet of nodes with software rollouts (driver, kernel, NCCL, firmware,
  CUDA, container image) that change speed by a known amount, slow nodes, per-signature code
  regressions, and optionally the mess real histories have (duplicate rows, twin runs under another
  id, missing versions, clock skew): for attribution, whatchanged, impact and the CLI.

A synchronous job runs at the pace of its slowest node: a slowing rollout (or a slow node) hits a
run if *any* of its nodes has it, a speed-up only if *all* of them do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from minutiae.history.record import RunRecord
from minutiae.history.rollouts import NodeChange

DAY = 86400.0
START = 1_767_225_600.0  # 2026-01-01T00:00:00Z
BASE_VERSIONS: dict[str, str] = {
    "driver": "570.124.06", "kernel": "5.15.0-126-generic", "nccl": "2.21.5",
    "firmware": "96.00.9F.00.01", "cuda": "12.8", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
}
NEW_VERSIONS: dict[str, str] = {
    "driver": "570.158.01", "kernel": "5.15.0-141-generic", "nccl": "2.23.4",
    "firmware": "96.00.A5.00.01", "cuda": "12.9", "image": "nvcr.io/nvidia/pytorch:25.04-py3",
}


@dataclass(frozen=True, slots=True)
class SeriesTruth:
    """Series ``series`` shifts by ``size`` (fraction) starting at run ``index``."""

    series: int
    index: int
    size: float


def synth_series(rng: np.random.Generator, n_series: int, n_runs: int, noise: float,
                 sizes: tuple[float, ...] = (), outlier_rate: float = 0.03,
                 min_before: int = 20, min_gap: int = 20) -> tuple[npt.NDArray[np.float64], list[SeriesTruth]]:
    """``n_series`` × ``n_runs`` log step times. Each series gets ``len(sizes)`` shifts (sizes in
    that order) at random positions at least ``min_gap`` runs apart, the first after
    ``min_before`` runs; ``sizes=()`` gives pure noise."""
    y = rng.normal(0.0, math.log1p(noise), size=(n_series, n_runs))
    out = rng.random((n_series, n_runs)) < outlier_rate
    y += out * np.log1p(rng.uniform(0.05, 0.30, size=(n_series, n_runs)))
    truth: list[SeriesTruth] = []
    k = len(sizes)
    if k:
        room = n_runs - min_before - (k - 1) * min_gap - min_gap // 2
        if room <= 0:
            raise ValueError("series too short for the requested shifts")
        offs = np.sort(rng.integers(0, room, size=(n_series, k)), axis=1)
        pos = min_before + offs + np.arange(k) * min_gap
        steps = np.zeros((n_series, n_runs))
        for j, s in enumerate(sizes):
            np.put_along_axis(steps, pos[:, j:j + 1], math.log1p(s), axis=1)
            truth.extend(SeriesTruth(i, int(pos[i, j]), s) for i in range(n_series))
        y += np.cumsum(steps, axis=1)
    return y, truth


@dataclass(frozen=True, slots=True)
class RolloutSpec:
    attr: str
    effect: float        # fraction, +0.03 = 3 % slower
    coverage: float      # share of nodes that get it
    start_day: float
    days: float          # rollout spread over this many days


@dataclass(frozen=True, slots=True)
class FleetConfig:
    seed: int = 0
    nodes: int = 128
    gpus_per_node: int = 8
    days: float = 56.0
    signatures: int = 30
    runs_per_signature: tuple[int, int] = (40, 120)
    nodes_per_run: tuple[int, ...] = (2, 4, 8, 16)
    noise: float = 0.01
    outlier_rate: float = 0.02
    rollouts: tuple[RolloutSpec, ...] = (
        RolloutSpec("driver", 0.03, 0.6, 20.0, 3.0),
        RolloutSpec("nccl", -0.02, 1.0, 30.0, 2.0),
        RolloutSpec("kernel", 0.0, 0.8, 12.0, 4.0),
        RolloutSpec("firmware", 0.0, 0.5, 40.0, 5.0),
    )
    slow_nodes: int = 1
    slow_node_effect: float = 0.08
    code_regression_rate: float = 0.3       # expected code changes per signature
    code_sizes: tuple[float, ...] = (0.02, 0.03, 0.05, -0.03)
    duplicates: int = 0                     # rows repeated verbatim
    twins: int = 0                          # runs repeated under another run_id
    missing_version_rate: float = 0.0       # share of runs with an empty driver column
    future_runs: int = 0                    # runs stamped a year ahead (clock skew)


@dataclass(frozen=True, slots=True)
class TrueRollout:
    attr: str
    old: str
    new: str
    effect: float
    nodes: frozenset[str]


@dataclass(frozen=True, slots=True)
class TrueCodeChange:
    signature: str
    run_id: str
    size: float


@dataclass(frozen=True, slots=True)
class SynthFleet:
    records: tuple[RunRecord, ...]
    changes: tuple[NodeChange, ...]
    fleet: dict[str, dict[str, str]]
    rollouts: tuple[TrueRollout, ...]
    code_changes: tuple[TrueCodeChange, ...]
    slow_nodes: dict[str, float] = field(default_factory=dict)   # node -> onset time
    end: float = 0.0


def synth_fleet(cfg: FleetConfig) -> SynthFleet:
    rng = np.random.default_rng(cfg.seed)
    n = cfg.nodes
    names = [f"gpu{i:04d}" for i in range(1, n + 1)]
    end = START + cfg.days * DAY
    # rollout change times: R x N (inf = never)
    specs = cfg.rollouts
    when = np.full((len(specs), n), np.inf)
    for r, s in enumerate(specs):
        covered = rng.random(n) < s.coverage
        when[r, covered] = START + (s.start_day + rng.uniform(0, s.days, covered.sum())) * DAY
    slow = rng.choice(n, size=cfg.slow_nodes, replace=False) if cfg.slow_nodes else np.array([], int)
    slow_on = START + rng.uniform(0.3, 0.7, size=slow.size) * cfg.days * DAY
    # runs: one block per signature
    counts = rng.integers(cfg.runs_per_signature[0], cfg.runs_per_signature[1] + 1, cfg.signatures)
    sig_of = np.repeat(np.arange(cfg.signatures), counts)
    total = int(counts.sum())
    times = START + rng.uniform(0, cfg.days * DAY, total)
    k_of_sig = rng.choice(np.array(cfg.nodes_per_run), cfg.signatures)
    k = k_of_sig[sig_of]
    kmax = int(k.max())
    # random node sets: first k of a random permutation per run (vectorised)
    perm = np.argsort(rng.random((total, n)), axis=1)[:, :kmax]
    valid = np.arange(kmax)[None, :] < k[:, None]
    t = times[:, None]
    exposed = (when[:, perm] <= t[None, :, :]) & valid[None]        # R x J x kmax
    any_on = exposed.any(axis=2)
    all_on = (exposed | ~valid[None]).all(axis=2)
    effects = np.array([math.log1p(s.effect) for s in specs])
    hit = np.where(effects[:, None] > 0, any_on, all_on)
    y = (effects[:, None] * hit).sum(axis=0)
    slow_mask = np.zeros(n, bool)
    slow_mask[slow] = True
    onset = np.full(n, np.inf)
    onset[slow] = slow_on
    on_slow = (slow_mask[perm] & (onset[perm] <= t) & valid).any(axis=1)
    y += on_slow * math.log1p(cfg.slow_node_effect)
    base = np.log(rng.uniform(0.4, 4.0, cfg.signatures))[sig_of]
    y += base + rng.normal(0, math.log1p(cfg.noise), total)
    y += (rng.random(total) < cfg.outlier_rate) * np.log1p(rng.uniform(0.05, 0.3, total))
    # per-signature code regressions at random times
    code: list[tuple[int, float, float]] = []
    n_code = rng.poisson(cfg.code_regression_rate, cfg.signatures)
    for si in range(cfg.signatures):
        for _ in range(int(n_code[si])):
            at = START + rng.uniform(0.2, 0.85) * cfg.days * DAY
            size = float(rng.choice(np.array(cfg.code_sizes)))
            y += ((sig_of == si) & (times >= at)) * math.log1p(size)
            code.append((si, at, size))
    order = np.argsort(times, kind="stable")
    run_id = np.empty(total, dtype=object)
    run_id[order] = [f"r{i:06d}" for i in range(total)]
    sigs = [f"sig{s:03d}-ws{int(k_of_sig[s]) * cfg.gpus_per_node}" for s in range(cfg.signatures)]
    attr_names = [s.attr for s in specs]
    base_attrs = {a: BASE_VERSIONS[a] for a in BASE_VERSIONS}
    missing = rng.random(total) < cfg.missing_version_rate
    durations = rng.uniform(1.0, 12.0, total) * 3600.0
    records: list[RunRecord] = []
    for j in order:
        kj = int(k[j])
        attrs = _versions(attr_names, exposed[:, j, :kj], bool(missing[j]))
        records.append(RunRecord(
            run_id=str(run_id[j]), time=float(times[j]), signature=sigs[sig_of[j]],
            value=float(math.exp(y[j])), nodes=tuple(names[i] for i in perm[j, :kj]), attrs=attrs,
            gpus=kj * cfg.gpus_per_node, duration_s=float(durations[j])))
    records = _mess(rng, records, cfg)
    changes = tuple(sorted((NodeChange(float(when[r, i]), names[i], s.attr, BASE_VERSIONS[s.attr],
                                       NEW_VERSIONS[s.attr])
                            for r, s in enumerate(specs) for i in range(n) if np.isfinite(when[r, i])),
                           key=lambda c: c.time))
    truth = tuple(TrueRollout(s.attr, BASE_VERSIONS[s.attr], NEW_VERSIONS[s.attr], s.effect,
                              frozenset(names[i] for i in range(n) if np.isfinite(when[r, i])))
                  for r, s in enumerate(specs))
    return SynthFleet(tuple(records), changes, {nm: dict(base_attrs) for nm in names}, truth,
                      _first_after(code, records, sigs),
                      {names[i]: float(o) for i, o in zip(slow, slow_on, strict=True)}, end)


def _versions(attr_names: list[str], exposed: np.ndarray, missing: bool) -> dict[str, frozenset[str]]:
    """A run's software versions: an attribute a rollout changes is the new version when all of
    the run's nodes had it (``exposed``: rollouts x the run's nodes), the old when none did, both
    when some did; ``missing``: the run did not record its driver."""
    attrs: dict[str, frozenset[str]] = {}
    for a in BASE_VERSIONS:
        if a in attr_names:
            on = exposed[attr_names.index(a)]
            vals = {NEW_VERSIONS[a]} if on.all() else ({BASE_VERSIONS[a]} if not on.any()
                                                        else {BASE_VERSIONS[a], NEW_VERSIONS[a]})
        else:
            vals = {BASE_VERSIONS[a]}
        attrs[a] = frozenset(vals)
    if missing:
        attrs["driver"] = frozenset()
    return attrs


def _first_after(code: list[tuple[int, float, float]], records: list[RunRecord],
                 sigs: list[str]) -> tuple[TrueCodeChange, ...]:
    """Each code regression's true first run: the signature's first run at or after it."""
    first_after = {}
    for si, at, size in code:
        ids = [rec for rec in records if rec.signature == sigs[si] and rec.time >= at]
        if ids:
            first_after[(si, at)] = TrueCodeChange(sigs[si], min(ids, key=lambda r: r.time).run_id, size)
    return tuple(first_after.values())


def _mess(rng: np.random.Generator, records: list[RunRecord], cfg: FleetConfig) -> list[RunRecord]:
    out = list(records)
    if cfg.duplicates:
        for i in rng.choice(len(records), cfg.duplicates, replace=False):
            out.append(records[int(i)])
    if cfg.twins:
        for i in rng.choice(len(records), cfg.twins, replace=False):
            r = records[int(i)]
            out.append(RunRecord(r.run_id + "-twin", r.time, r.signature, r.value, r.metric, r.nodes,
                                 r.attrs, r.gpus, r.duration_s))
    if cfg.future_runs:
        for i in rng.choice(len(records), cfg.future_runs, replace=False):
            r = out[int(i)]
            out[int(i)] = RunRecord(r.run_id, r.time + 365 * DAY, r.signature, r.value, r.metric,
                                    r.nodes, r.attrs, r.gpus, r.duration_s)
    return out

"""Variance reduction: take out of each run what the fleet explains — the time of day it ran
and the slowest node it drew — before change points are searched (pure).

A synchronous job runs at the pace of its slowest node, so much of the run-to-run noise of a
signature is *which* nodes a run drew: a run that touched a slow node is slow whatever its code.
Every run of every signature that used a node says something about that node, so a node's
slowness can be measured across the fleet and removed from each run before change points are
searched; a code regression, which moves every run of its signature whatever nodes they used, is
left untouched.

Method (sparse least squares over run × node incidences, scipy):

1. residual of each run = ln(step time) − its signature's local level (rolling median over
   ``window`` runs, sizes normalised), clipped at ±``clip``·σ (σ: pooled robust noise);
2. all node effects are fitted *jointly* — residual ≈ Σ over the run's nodes of that node's effect
   in that period of ``days`` — by damped least squares (``scipy.sparse.linalg.lsqr``, damping
   ``damp``·σ: a node with few runs is shrunk toward "not slow"). Jointly, because a run that drew
   one slow node makes its seven healthy companions look slow too; a per-node mean blames them all;
3. a node is slow in a period when its effect exceeds ``z``·σ/√m (m runs) and ``min_effect``; a
   run's penalty is the largest slow-node effect among its nodes;
4. y − penalty is the series the detector sees. Two passes (the first pass' slow runs no longer
   drag the local levels).

Before that, a fleet-wide time-of-day cycle (facility temperature, daytime load on shared storage
or network) is measured: residuals against each signature's median over ±12 h (a whole cycle,
so the level does not follow it), fitted over all signatures by the daily cycle's first two
harmonics (sin/cos of 2π and 4π × UTC time of day); when they are beyond noise (χ², 4 degrees of
freedom, p < ``hour_alpha``) and swing by at least ``min_effect``/2, each run's offset at its
start time is taken out too. A cycle seen by a busy signature
(dozens of runs a day) otherwise reads as a change point every half day.

``NodeAdjustment`` reports what was taken out: each run's penalty and the nodes found slow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse, stats
from scipy.sparse.linalg import lsqr

from minutiae.analyses.regress.detect import (
    group_series,
    robust_sigma,
    rolling_median,
    size_normalised,
)
from minutiae.history.record import RunRecord

F64 = npt.NDArray[np.float64]
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class NodeParams:
    window: int = 9
    days: float = 7.0
    clip: float = 3.0
    damp: float = 1.0
    z: float = 3.0
    min_effect: float = 0.01
    min_runs: int = 4
    passes: int = 2
    hour_alpha: float = 0.001
    hour_window_s: float = 12 * 3600.0
    hour_min_runs: int = 8


@dataclass(frozen=True, slots=True)
class NodeAdjustment:
    """``penalty``: run_id → ln-step-time taken out (the slowest node's effect; exp(p) − 1 is the
    share of the run's step time its slow node explains). ``slow_nodes``: node → (runs it slowed,
    median effect as a fraction). ``sigma_before``/``sigma_after``: pooled robust run-to-run noise
    of the signatures' series (log units) before and after — what the adjustment bought."""

    penalty: dict[str, float]
    slow_nodes: dict[str, tuple[int, float]]
    sigma_before: float
    sigma_after: float
    hour_of_day: tuple[float, ...] = ()
    hour_p: float = 1.0

    def to_json(self) -> dict[str, Any]:
        def r6(x: float) -> float | None:
            return round(x, 6) if math.isfinite(x) else None

        return {"runs_adjusted": len(self.penalty),
                "slow_nodes": [{"node": n, "runs": k, "effect": round(e, 6)}
                               for n, (k, e) in sorted(self.slow_nodes.items(), key=lambda kv: -kv[1][1])],
                "noise_before": r6(self.sigma_before), "noise_after": r6(self.sigma_after),
                "hour_of_day": [round(math.expm1(h), 6) for h in self.hour_of_day],
                "hour_of_day_p": self.hour_p}


def _pooled_sigma(series: dict[str, F64]) -> float:
    sig = [(robust_sigma(y), y.size) for y in series.values() if y.size >= 3]
    if not sig:
        return float("nan")
    w = np.array([n for _, n in sig], dtype=np.float64)
    return float(np.sqrt(np.sum(w * np.array([s for s, _ in sig]) ** 2) / w.sum()))


def node_penalties(runs: Sequence[RunRecord], p: NodeParams | None = None) -> NodeAdjustment:
    """Each run's slow-node penalty (see the module doc); runs without node names get none."""
    p = p or NodeParams()
    groups = group_series(runs)
    order = [r for s in groups.values() for r in s]
    base = {sig: size_normalised(s) for sig, s in groups.items()}
    sigma = _pooled_sigma(base)
    ids = [r.run_id for r in order]
    y = np.concatenate([base[s] for s in groups]) if order else np.zeros(0)
    sig_of = np.repeat(np.arange(len(groups)), [len(s) for s in groups.values()])
    times = np.fromiter((r.time for r in order), np.float64, len(order))
    names = sorted({n for r in order for n in r.nodes})
    col = {n: i for i, n in enumerate(names)}
    inc_run = np.fromiter((j for j, r in enumerate(order) for _ in r.nodes), np.int64)
    inc_node = np.fromiter((col[n] for r in order for n in r.nodes), np.int64)
    if not order or not math.isfinite(sigma):
        return NodeAdjustment({}, {}, sigma, sigma)
    coef, hour_p = _hour_of_day(y, sig_of, times, sigma, p)
    hour_off = _day_basis(times) @ coef if coef.size else np.zeros(len(order))
    hours = _day_basis(np.arange(24, dtype=np.float64) * 3600.0 + 1800.0) @ coef if coef.size else np.zeros(0)
    y = y - hour_off
    penalty = np.zeros(len(order))
    if not names:
        return _result(ids, hour_off, {}, sigma, y, sig_of, groups, hours, hour_p)
    period = np.floor((times - times.min()) / (p.days * DAY)).astype(np.int64)
    cell = inc_node * (int(period.max()) + 1) + period[inc_run]
    cells, inc_cell = np.unique(cell, return_inverse=True)
    a = sparse.csr_matrix((np.ones(inc_run.size), (inc_run, inc_cell)), shape=(len(order), cells.size))
    m_cell = np.bincount(inc_cell, minlength=cells.size).astype(np.float64)
    slow_cell = np.zeros(cells.size, bool)
    beta = np.zeros(cells.size)
    for _ in range(p.passes):
        adj = y - penalty
        level = np.concatenate([rolling_median(adj[sig_of == g], p.window) for g in range(len(groups))])
        res = np.clip(y - level, -p.clip * sigma, p.clip * sigma) / sigma
        beta = lsqr(a, res, damp=p.damp)[0] * sigma
        slow_cell = (m_cell >= p.min_runs) & (beta > np.maximum(p.z * sigma / np.sqrt(np.maximum(m_cell, 1)),
                                                                  math.log1p(p.min_effect)))
        hit = slow_cell[inc_cell]
        penalty = np.zeros(len(order))
        np.maximum.at(penalty, inc_run[hit], beta[inc_cell[hit]])
    slow: dict[str, tuple[int, float]] = {}
    n_periods = int(period.max()) + 1
    for i in np.unique(cells[slow_cell] // n_periods):
        m = slow_cell & (cells // n_periods == i)
        slow[names[int(i)]] = (int(m_cell[m].sum()), math.expm1(float(np.median(beta[m]))))
    return _result(ids, hour_off + penalty, slow, sigma, y - penalty, sig_of, groups, hours, hour_p)


def _result(ids: list[str], total: F64, slow: dict[str, tuple[int, float]], sigma: float, after: F64,
            sig_of: npt.NDArray[np.int64], groups: dict[str, list[RunRecord]], hours: F64,
            hour_p: float) -> NodeAdjustment:
    series = {sig: after[sig_of == g] for g, sig in enumerate(groups)}
    return NodeAdjustment({ids[j]: float(total[j]) for j in np.flatnonzero(total)}, slow, sigma,
                          _pooled_sigma(series), tuple(float(h) for h in hours), hour_p)


def _day_basis(times: F64) -> F64:
    """The daily cycle's first two harmonics at each time: sin, cos of 2π and 4π × time of day."""
    w = 2.0 * np.pi * (times % DAY) / DAY
    return np.column_stack([np.sin(w), np.cos(w), np.sin(2 * w), np.cos(2 * w)])


def _hour_of_day(y: F64, sig_of: npt.NDArray[np.int64], times: F64, sigma: float,
                 p: NodeParams) -> tuple[F64, float]:
    """Fleet-wide daily cycle: least-squares coefficients of its first two harmonics (log units;
    empty when not beyond noise) and the p-value of all four being zero (χ², 4 dof). Four numbers
    rather than 24 hourly means: a few days of runs pin a smooth cycle, not 24 noisy bins."""
    res = np.full(y.size, np.nan)
    for g in np.unique(sig_of):
        idx = np.flatnonzero(sig_of == g)
        t = times[idx]
        lo = np.searchsorted(t, t - p.hour_window_s, side="left")
        hi = np.searchsorted(t, t + p.hour_window_s, side="right")
        for k in np.flatnonzero(hi - lo >= p.hour_min_runs):
            res[idx[k]] = y[idx[k]] - float(np.median(y[idx[lo[k]:hi[k]]]))
    ok = np.isfinite(res)
    if ok.sum() < 4 * p.hour_min_runs:
        return np.zeros(0), 1.0
    r = np.clip(res[ok], -p.clip * sigma, p.clip * sigma)
    x = _day_basis(times[ok])
    x = x - x.mean(axis=0)
    coef, *_ = np.linalg.lstsq(x, r - r.mean(), rcond=None)
    chi2 = float(coef @ (x.T @ x) @ coef) / sigma ** 2
    pv = float(stats.chi2.sf(chi2, 4))
    if pv >= p.hour_alpha or float(np.abs(_day_basis(np.arange(0.0, DAY, 600.0)) @ coef).max()) < math.log1p(
            p.min_effect / 2):
        return np.zeros(0), pv
    return coef, pv


def adjusted_runs(runs: Sequence[RunRecord], adj: NodeAdjustment) -> list[RunRecord]:
    """The runs with each one's slow-node penalty taken out of its step time."""
    from dataclasses import replace

    out = []
    for r in runs:
        pen = adj.penalty.get(r.run_id, 0.0)
        if pen:
            f = math.exp(-pen) if r.metric.higher_is_slower else math.exp(pen)
            r = replace(r, value=r.value * f)
        out.append(r)
    return out

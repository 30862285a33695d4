"""Incremental sequential test for one timing series (compute or communication).

Per step, each rank's log time is compared with the median of its peer group at that step
(``r = log x - median_peers(log x)``: drift, checkpoint steps and anything else shared by the
group cancel), standardised by the group's robust noise (``z = r / sigma``) and fed to the two
CUSUMs of ``stragglers_calib.design``.

A block of steps is processed with whole-array operations, no Python loop over steps or ranks:
the CUSUM (Lindley) recursion ``S_t = max(0, S_{t-1} + x_t)`` has the closed form
``S_t = W_t - min(0, min_{u<=t} W_u)`` with ``W_t = S_{-1} + sum_{u<=t} x_u``, i.e. one
cumulative sum and one running minimum along the step axis; the start of the current excursion
(the change-point estimate) is the last step where ``S`` was 0 (a running maximum of indices).
State carried between blocks is a few arrays of length ``ranks``, so a one-step block (streaming)
and a whole file are the same code and give the same answer.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from minutiae.analyses.stragglers_types import Design

#: per-step log-ratio bounds used for the slowdown estimate (a 1-step 10x pause counts as e^1)
R_LOW, R_HIGH = -0.5, 1.0
#: reference of the estimation-only CUSUM that dates large shifts (>= 6 sigma)
ESTIMATOR_K = 3.0


def group_medians(logx: np.ndarray, members: list[np.ndarray]) -> np.ndarray:
    """(steps, groups) medians of ``logx`` (steps, ranks) over each group's columns; NaN-aware."""
    out = np.empty((logx.shape[0], len(members)), dtype=np.float64)
    for g, cols in enumerate(members):
        sub = logx if len(members) == 1 else logx[:, cols]
        if np.isnan(sub).any():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                out[:, g] = np.nanmedian(sub, axis=1)
        else:
            out[:, g] = np.median(sub, axis=1)
    return out


def peer_log_ratio(x: np.ndarray, groups: np.ndarray,
                   members: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``log x - median of the peer group at the same step`` (NaN where ``x`` is missing or
    <= 0) and the (steps, groups) medians of ``log x``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logx = np.log(np.where(x > 0, x, np.nan)).astype(np.float32)
    med = group_medians(logx, members).astype(np.float32)
    return logx - (med if len(members) == 1 else med[:, groups]), med


@dataclass(frozen=True, slots=True)
class Alarms:
    """Alarmed ranks (indices into the rank axis) and what the test knew about each."""

    index: np.ndarray
    since_step: np.ndarray
    detected_step: np.ndarray
    detector: np.ndarray  # 0 = fast, 1 = slow
    score: np.ndarray
    mean_log_ratio: np.ndarray
    se_log_ratio: np.ndarray


class _Cusum:
    """One CUSUM's carried state: statistic, excursion start and the excursion's sums."""

    def __init__(self, n: int, k: float, clip: float, h: float) -> None:
        self.k, self.clip, self.h = np.float32(k), np.float32(clip), h
        self.s = np.zeros(n, dtype=np.float32)
        self.start = np.full(n, -1, dtype=np.int64)
        self.sums = np.zeros((3, n))  # sum r, sum r^2, count over the current excursion

    def run(self, z: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Statistic (steps, ranks) over the block and the index of the last zero (-1: none)."""
        x = np.clip(z, -self.clip, self.clip)
        x -= self.k
        x[~ok] = 0.0  # a missing step leaves S unchanged
        w = np.cumsum(x, axis=0, out=x)
        w += self.s
        low = np.minimum.accumulate(w, axis=0)
        np.minimum(low, 0.0, out=low)
        stat = np.subtract(w, low, out=w)
        zero_at = np.where(stat <= 0.0, np.arange(stat.shape[0], dtype=np.int32)[:, None], -1)
        return stat, np.maximum.accumulate(zero_at, axis=0)


class SeriesDetector:
    """CUSUM bank over the ranks of one timing series; feed it blocks of steps in order."""

    def __init__(self, groups: np.ndarray, sigma: np.ndarray, design: Design) -> None:
        self.groups = groups.astype(np.int64)
        ng = int(self.groups.max()) + 1 if groups.size else 0
        self.members = [np.flatnonzero(self.groups == g) for g in range(ng)]
        self.sigma = sigma[self.groups].astype(np.float32)
        n = groups.size
        self.tests = [_Cusum(n, d.k, d.clip, d.h) for d in design.detectors]
        self.estimator = _Cusum(n, ESTIMATOR_K, ESTIMATOR_K + 4.0, float("inf"))
        self.alarm_step = np.full(n, -1, dtype=np.int64)
        self.alarm_since = np.full(n, -1, dtype=np.int64)
        self.alarm_det = np.full(n, -1, dtype=np.int8)
        self.alarm_score = np.zeros(n)
        self.alarm_sums = np.zeros((3, n))
        self.last_step = np.full(n, -1, dtype=np.int64)
        self.medians: list[float] = []

    def update(self, x: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Process ``x`` (len(steps), ranks) seconds; returns the ranks newly alarmed."""
        r, med = peer_log_ratio(x, self.groups, self.members)
        typical = np.exp(np.median(med, axis=1))
        self.medians.extend(typical[np.isfinite(typical)].tolist())
        ok = np.isfinite(r)
        z = np.where(ok, r / self.sigma, np.float32(0.0))
        rc = np.clip(np.where(ok, r, np.float32(0.0)), R_LOW, R_HIGH)
        cum = np.stack([np.cumsum(rc, axis=0), np.cumsum(rc * rc, axis=0),
                        np.cumsum(ok, axis=0, dtype=np.float32)])  # (3, steps, ranks)
        n_steps = x.shape[0]
        # excursions still open at the block start begin at its first step when S was 0
        for t in (*self.tests, self.estimator):
            fresh_start = t.s <= 0.0
            t.start[fresh_start] = steps[0]
            t.sums[:, fresh_start] = 0.0
        first = np.full(x.shape[1], n_steps, dtype=np.int64)
        which = np.full(x.shape[1], -1, dtype=np.int8)
        runs = []
        for d, t in enumerate(self.tests):
            stat, last_zero = t.run(z, ok)
            over = stat > t.h
            hit = over.any(axis=0)
            at = np.where(hit, over.argmax(axis=0), n_steps)
            better = at < first
            first[better], which[better] = at[better], d
            runs.append((stat, last_zero))
        runs.append(self.estimator.run(z, ok))
        waiting = self.alarm_step < 0
        new = np.flatnonzero(waiting & (first < n_steps))
        if new.size:
            ta = first[new]
            det = which[new]
            z_scale = self.sigma[new].astype(np.float64)
            since, sums = self._excursion(self.tests[0], runs[0], ta, new, cum, steps)
            for d in range(1, len(self.tests)):
                s_d, u_d = self._excursion(self.tests[d], runs[d], ta, new, cum, steps)
                pick = det == d
                since[pick], sums[:, pick] = s_d[pick], u_d[:, pick]
            # a large shift is dated by the estimation-only CUSUM tuned to it (its k is closer
            # to half the shift, so pre-onset noise is not absorbed into the excursion)
            est = runs[-1]
            s_e, u_e = self._excursion(self.estimator, est, ta, new, cum, steps)
            shift = u_e[0] / np.maximum(u_e[2], 1) / z_scale
            sharp = (est[0][ta, new] > 0) & (shift >= 2 * self.estimator.k)
            since[sharp], sums[:, sharp] = s_e[sharp], u_e[:, sharp]
            self.alarm_since[new] = since
            self.alarm_sums[:, new] = sums + cum[:, -1, new] - cum[:, ta, new]
            self.alarm_det[new] = det
            self.alarm_score[new] = np.max(
                [rs[0][ta, new] / tt.h for rs, tt in zip(runs[:-1], self.tests, strict=True)], axis=0)
            self.alarm_step[new] = steps[ta]
        old = np.flatnonzero(~waiting)
        if old.size:
            self.alarm_sums[:, old] += cum[:, -1, old]
        for (stat, last_zero), t in zip(runs, [*self.tests, self.estimator], strict=True):
            s_end, j_end = stat[-1], last_zero[-1]
            open_ = s_end > 0.0
            restart = open_ & (j_end >= 0)
            cont = open_ & (j_end < 0)
            jr = j_end[restart]
            t.start[restart] = steps[np.minimum(jr + 1, n_steps - 1)]
            t.sums[:, restart] = cum[:, -1, restart] - cum[:, jr, restart]
            t.sums[:, cont] += cum[:, -1, cont]
            t.sums[:, ~open_] = 0.0
            t.s = s_end.astype(np.float32)
        seen = ok.any(axis=0)
        last_ok = n_steps - 1 - ok[::-1].argmax(axis=0)
        self.last_step[seen] = steps[last_ok[seen]]
        return new

    @staticmethod
    def _excursion(t: _Cusum, run: tuple[np.ndarray, np.ndarray], ta: np.ndarray,
                   sel: np.ndarray, cum: np.ndarray, steps: np.ndarray,
                   ) -> tuple[np.ndarray, np.ndarray]:
        """First step and (sum r, sum r^2, n) of ``t``'s excursion open at block row ``ta``."""
        j = run[1][ta, sel]
        inside = j >= 0
        since = np.where(inside, steps[np.minimum(j + 1, steps.size - 1)], t.start[sel])
        before = np.where(inside, cum[:, np.maximum(j, 0), sel], 0.0)
        carry = np.where(inside, 0.0, t.sums[:, sel])
        return since, cum[:, ta, sel] - before + carry

    def alarms(self) -> Alarms:
        idx = np.flatnonzero(self.alarm_step >= 0)
        total, sq, cnt = self.alarm_sums[:, idx]
        n = np.maximum(cnt, 1)
        mean = total / n
        var = np.maximum(sq / n - mean * mean, 0.0)
        se = np.sqrt(var / np.maximum(n - 1, 1))
        return Alarms(idx, self.alarm_since[idx], self.alarm_step[idx], self.alarm_det[idx],
                      self.alarm_score[idx], mean, se)

    def typical_seconds(self) -> float:
        v = np.asarray(self.medians)
        v = v[np.isfinite(v)]
        return float(np.median(v)) if v.size else float("nan")

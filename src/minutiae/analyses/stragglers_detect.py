"""Incremental sequential test for one timing series (compute or communication).

Per step, each rank's log time is compared with the median of its peer group at that step
(``r = log x - median_peers(log x)``: drift, checkpoint steps and anything else shared by the
group cancel), standardised by the group's robust noise (``z = r / sigma``) and fed to the two
CUSUMs of ``stragglers_calib.design``.

A block of steps is processed column-wise: normalisation, winsorisation and the excursion sums
are whole-block array operations; the CUSUM recursion ``S_t = max(0, S_{t-1} + x_t)`` runs one
step at a time over rank-length arrays, in place (measured 4x faster than its closed form
``W_t - min(0, min_{u<=t} W_u)`` with accumulate along the step axis, which thrashes the cache).
No Python loop ever visits a rank. The start of the current excursion (the change-point
estimate) is the last step where ``S`` was 0. State carried between blocks is a few arrays of
length ``ranks``, so a one-step block (streaming) and a whole file are the same code and give
the same answer.
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


#: peer medians use at most this many ranks of a group (evenly strided): the median of 2,048
#: values is within 0.03 sigma of the whole group's, common to all its ranks
MEDIAN_SAMPLE = 2048


def _sample(cols: np.ndarray) -> np.ndarray | slice:
    """The columns a group's median is taken over (a slice when they are contiguous)."""
    step = max(1, cols.size // MEDIAN_SAMPLE)
    picked = cols[::step]
    if picked.size and np.array_equal(picked, np.arange(picked[0], picked[-1] + 1, step)):
        return slice(int(picked[0]), int(picked[-1]) + 1, step)
    return picked


def group_medians(logx: np.ndarray, members: list[np.ndarray]) -> np.ndarray:
    """(steps, groups) medians of ``logx`` (steps, ranks) over each group's columns; NaN-aware."""
    out = np.empty((logx.shape[0], len(members)), dtype=np.float32)
    for g, cols in enumerate(members):
        sub = logx[:, _sample(cols)]
        if np.isnan(sub).any():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                out[:, g] = np.nanmedian(sub, axis=1)
        else:
            out[:, g] = np.median(sub, axis=1)
    return out


def _spans(members: list[np.ndarray]) -> list[slice] | None:
    """Each group as one contiguous slice of columns, or None when they are not."""
    spans = []
    for cols in members:
        if cols.size and cols[-1] - cols[0] + 1 == cols.size:
            spans.append(slice(int(cols[0]), int(cols[-1]) + 1))
        else:
            return None
    return spans


def peer_log_ratio(x: np.ndarray, groups: np.ndarray,
                   members: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``log x - median of the peer group at the same step`` (NaN where ``x`` is missing or
    <= 0) and the (steps, groups) medians of ``log x``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logx = np.log(x, dtype=np.float32)
        if not (x > 0).all():
            logx[~(x > 0)] = np.nan
    med = group_medians(logx, members)
    spans = _spans(members)
    if spans is not None:
        for g, span in enumerate(spans):
            logx[:, span] -= med[:, g:g + 1]
    else:
        logx -= med[:, groups]
    return logx, med


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
        self.sums = np.zeros((2, n))  # sum r, count over the current excursion

    def run(self, z: np.ndarray, missing: np.ndarray) -> np.ndarray:
        """The statistic (steps, ranks) over the block.

        The recursion runs step by step with two in-place operations on rank-length rows (one
        row stays in cache); a missing value adds nothing, so ``S`` is unchanged."""
        stat = np.minimum(z, self.clip)
        np.maximum(stat, -self.clip, out=stat)
        stat -= self.k
        np.copyto(stat, np.float32(0.0), where=missing)
        prev = self.s
        for t in range(stat.shape[0]):
            row = stat[t]
            row += prev
            np.maximum(row, 0.0, out=row)
            prev = row
        return stat


def _running_sum(x: np.ndarray, out: np.ndarray) -> None:
    """Cumulative sum along the step axis, row by row (numpy's axis-0 cumsum is ~3x slower)."""
    out[0] = x[0]
    for t in range(1, x.shape[0]):
        np.add(out[t - 1], x[t], out=out[t])


def _last_zero(stat: np.ndarray, upto: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """For each column ``cols[i]``, the last row <= ``upto[i]`` where ``stat`` is 0 (-1: none)."""
    rows = np.arange(stat.shape[0])[:, None]
    zero = (stat[:, cols] <= 0.0) & (rows <= upto[None, :])
    return np.where(zero, rows, -1).max(axis=0)


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
        self.alarm_sums = np.zeros((2, n))
        self.last_step = np.full(n, -1, dtype=np.int64)
        self.medians: list[float] = []

    def update(self, x: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Process ``x`` (len(steps), ranks) seconds; returns the ranks newly alarmed."""
        return self.update_ratio(self.ratios(x), steps)

    def ratios(self, x: np.ndarray) -> np.ndarray:
        """The peer log-ratios of ``x`` (and the typical value of the series, kept for costs)."""
        r, med = peer_log_ratio(x, self.groups, self.members)
        typical = np.exp(np.median(med, axis=1))
        self.medians.extend(typical[np.isfinite(typical)].tolist())
        return r

    def update_ratio(self, r: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Test log-ratios ``r`` (modified in place); returns the columns newly alarmed."""
        ok = np.isfinite(r)
        missing = ~ok
        np.copyto(r, np.float32(0.0), where=missing)
        z = r / self.sigma
        np.maximum(r, R_LOW, out=r)
        np.minimum(r, R_HIGH, out=r)
        cum = np.empty((2, *r.shape), dtype=np.float32)  # running sum of r, count
        _running_sum(r, cum[0])
        if missing.any():
            _running_sum(ok.astype(np.float32), cum[1])
        else:
            cum[1] = np.arange(1, r.shape[0] + 1, dtype=np.float32)[:, None]
        n_steps = r.shape[0]
        # excursions still open at the block start begin at its first step when S was 0
        for t in (*self.tests, self.estimator):
            fresh_start = t.s <= 0.0
            t.start[fresh_start] = steps[0]
            t.sums[:, fresh_start] = 0.0
        first = np.full(r.shape[1], n_steps, dtype=np.int64)
        which = np.full(r.shape[1], -1, dtype=np.int8)
        runs = []
        for d, t in enumerate(self.tests):
            stat = t.run(z, missing)
            over = stat > t.h
            hit = over.any(axis=0)
            at = np.where(hit, over.argmax(axis=0), n_steps)
            better = at < first
            first[better], which[better] = at[better], d
            runs.append(stat)
        runs.append(self.estimator.run(z, missing))
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
            shift = u_e[0] / np.maximum(u_e[1], 1) / z_scale
            sharp = (est[ta, new] > 0) & (shift >= 2 * self.estimator.k)
            since[sharp], sums[:, sharp] = s_e[sharp], u_e[:, sharp]
            self.alarm_since[new] = since
            self.alarm_sums[:, new] = sums + cum[:, -1, new] - cum[:, ta, new]
            self.alarm_det[new] = det
            self.alarm_score[new] = np.max(
                [rs[ta, new] / tt.h for rs, tt in zip(runs[:-1], self.tests, strict=True)], axis=0)
            self.alarm_step[new] = steps[ta]
        old = np.flatnonzero(~waiting)
        if old.size:
            self.alarm_sums[:, old] += cum[:, -1, old]
        for stat, t in zip(runs, [*self.tests, self.estimator], strict=True):
            s_end = stat[-1]
            zero = stat <= 0.0
            j_end = np.where(zero.any(axis=0), n_steps - 1 - zero[::-1].argmax(axis=0), -1)
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
    def _excursion(t: _Cusum, stat: np.ndarray, ta: np.ndarray,
                   sel: np.ndarray, cum: np.ndarray, steps: np.ndarray,
                   ) -> tuple[np.ndarray, np.ndarray]:
        """First step and (sum r, n) of ``t``'s excursion open at block row ``ta``."""
        j = _last_zero(stat, ta, sel)
        inside = j >= 0
        since = np.where(inside, steps[np.minimum(j + 1, steps.size - 1)], t.start[sel])
        before = np.where(inside, cum[:, np.maximum(j, 0), sel], 0.0)
        carry = np.where(inside, 0.0, t.sums[:, sel])
        return since, cum[:, ta, sel] - before + carry

    def alarms(self) -> Alarms:
        """The standard error of the mean log-ratio is the rank's calibrated noise over
        sqrt(steps since onset) (the per-step values are independent given the peer median)."""
        idx = np.flatnonzero(self.alarm_step >= 0)
        total, cnt = self.alarm_sums[:, idx]
        n = np.maximum(cnt, 1)
        se = self.sigma[idx].astype(np.float64) / np.sqrt(n)
        return Alarms(idx, self.alarm_since[idx], self.alarm_step[idx], self.alarm_det[idx],
                      self.alarm_score[idx], total / n, se)

    def typical_seconds(self) -> float:
        v = np.asarray(self.medians)
        v = v[np.isfinite(v)]
        return float(np.median(v)) if v.size else float("nan")

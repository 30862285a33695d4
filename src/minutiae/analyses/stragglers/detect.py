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

import numpy as np

from minutiae.analyses.stragglers.armodel import ArModel
from minutiae.analyses.stragglers.held import Alarms, after_onset, held_peak
from minutiae.analyses.stragglers.medians import group_medians
from minutiae.analyses.stragglers.prep import log_times
from minutiae.analyses.stragglers.recovery import Recovery
from minutiae.analyses.stragglers.shift import ShiftTest
from minutiae.analyses.stragglers.types import Design, Reference
from minutiae.analyses.stragglers.whiten import NoiseState

#: per-step log-ratio bounds used for the slowdown estimate (a 1-step 10x pause counts as e^1)
R_LOW, R_HIGH = -0.5, 1.0
#: blocks up to this many steps keep excursion sums in the recursion loop (cheaper than gathers)
SHORT_BLOCK = 4
#: up to this many ranks a block's CUSUM runs in closed form over the whole block (the step
#: loop's per-step overhead dominates); above it the loop keeps one row in cache
SMALL_COLUMNS = 2048
#: reference of the estimation-only CUSUM that dates large shifts (>= 6 sigma)
ESTIMATOR_K = 3.0
#: tested steps of every rank kept (is a slowdown still there? the noise model's refits)
RECENT = 100
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
    logx = log_times(x)
    med = group_medians(logx, members)
    spans = _spans(members)
    if spans is not None:
        for g, span in enumerate(spans):
            logx[:, span] -= med[:, g:g + 1]
    else:
        logx -= med[:, groups]
    return logx, med


class _Cusum:
    """One CUSUM's carried state: statistic, excursion start and the excursion's sums."""

    def __init__(self, n: int, k: float, clip: float, h: float) -> None:
        self.k, self.clip, self.h = np.float32(k), np.float32(clip), h
        self.s = np.zeros(n, dtype=np.float32)
        self.start = np.full(n, -1, dtype=np.int64)
        self.sum_r = np.zeros(n)  # sum of r over the current excursion
        self.sum_n = np.zeros(n)  # samples in it

    def run(self, z: np.ndarray, missing: np.ndarray | None, r: np.ndarray,
            ok: np.ndarray | None, cum: tuple[np.ndarray, np.ndarray],
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The statistic (steps, ranks) over the block; per rank the last block row where it
        was 0 (-1: none); the sums of ``r`` and of samples over the excursion open at the end.
        The recursion runs step by step with in-place operations on rank-length rows (one row
        stays in cache); a missing value adds nothing."""
        stat = np.minimum(z, self.clip)
        np.maximum(stat, -self.clip, out=stat)
        stat -= self.k
        if missing is not None:
            np.copyto(stat, np.float32(0.0), where=missing)
        last = np.full(stat.shape[1], -1, dtype=np.int64)
        if stat.shape[0] > SHORT_BLOCK and stat.shape[1] <= SMALL_COLUMNS:
            # few ranks: the closed form S_t = W_t - min(0, min_{u<=t} W_u), W = S_0 + sum x,
            # in whole-array operations (a Python step loop costs more than the arithmetic here)
            w = np.cumsum(stat, axis=0, dtype=np.float64)
            w += self.s
            low = np.minimum.accumulate(w, axis=0)
            np.minimum(low, 0.0, out=low)
            w -= low
            stat[:] = w
            zero = w <= 0.0
            seen = zero.any(axis=0)
            last[seen] = stat.shape[0] - 1 - zero[::-1].argmax(axis=0)[seen]
            return stat, last, *self._sums_after(last, cum)
        if stat.shape[0] > SHORT_BLOCK:
            prev = self.s
            for t in range(stat.shape[0]):
                row = stat[t]
                row += prev
                np.maximum(row, 0.0, out=row)
                np.copyto(last, t, where=row <= 0.0)
                prev = row
            return stat, last, *self._sums_after(last, cum)
        # short blocks (streaming): keep the excursion sums inside the loop, no gathers
        acc_r = self.sum_r.copy()
        acc_n = self.sum_n.copy()
        prev = self.s
        for t in range(stat.shape[0]):
            row = stat[t]
            row += prev
            np.maximum(row, 0.0, out=row)
            zero = row <= 0.0
            np.copyto(last, t, where=zero)
            acc_r += r[t]
            acc_n += 1.0 if ok is None else ok[t]
            np.copyto(acc_r, 0.0, where=zero)
            np.copyto(acc_n, 0.0, where=zero)
            prev = row
        return stat, last, acc_r, acc_n

    def _sums_after(self, last: np.ndarray, cum: tuple[np.ndarray, np.ndarray],
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Sums over the excursion open at the block end, from the block's running sums."""
        j = np.maximum(last, 0)[None, :]
        out = []
        for c, carried in zip(cum, (self.sum_r, self.sum_n), strict=True):
            since_zero = c[-1] - np.take_along_axis(c, j, axis=0)[0]
            out.append(np.where(last >= 0, since_zero, carried + c[-1]))
        return out[0], out[1]

    def carry(self, stat: np.ndarray, last: np.ndarray, acc_r: np.ndarray, acc_n: np.ndarray,
              steps: np.ndarray) -> None:
        """State for the next block: the open excursion's start and sums."""
        j = np.minimum(last + 1, steps.size - 1)
        self.start = np.where(last >= 0, steps[j], self.start)
        closed = stat[-1] <= 0.0
        self.sum_r = np.where(closed, 0.0, acc_r)
        self.sum_n = np.where(closed, 0.0, acc_n)
        self.s = stat[-1].copy()


def _running_sum(x: np.ndarray, out: np.ndarray) -> None:
    """Cumulative sum along the step axis, row by row (numpy's axis-0 cumsum is ~3x slower on
    wide rows; on narrow ones the loop's per-step cost dominates and cumsum is used)."""
    if x.shape[1] <= SMALL_COLUMNS:
        np.cumsum(x, axis=0, out=out)
        return
    out[0] = x[0]
    for t in range(1, x.shape[0]):
        np.add(out[t - 1], x[t], out=out[t])


def _last_zero(stat: np.ndarray, upto: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """For each column ``cols[i]``, the last row <= ``upto[i]`` where ``stat`` is 0 (-1: none)."""
    rows = np.arange(stat.shape[0])[:, None]
    zero = (stat[:, cols] <= 0.0) & (rows <= upto[None, :])
    return np.asarray(np.where(zero, rows, -1).max(axis=0))


class SeriesDetector:
    """CUSUM bank over the ranks of one timing series; feed it blocks of steps in order."""

    def __init__(self, groups: np.ndarray, sigma: np.ndarray, design: Design,
                 peers: Reference | None = None, allowance: np.ndarray | None = None,
                 model: ArModel | None = None, ratio_sigma: np.ndarray | None = None,
                 tail: np.ndarray | None = None, fallback: ArModel | None = None) -> None:
        """``sigma``: per group, the scale of what the tests see (the innovations when
        ``model`` has an AR part, the ratios otherwise); ``ratio_sigma``: per group, the
        ratios' own scale (for the slowdown's interval; default ``sigma``); ``tail``: a
        sample of the values the tests will see, on the scale of their measured noise (their
        tails, not their scale, may raise the thresholds: ``calib.tail_design``); ``fallback``:
        set when the series may be too thin to refit alone (the node test: ``armodel.fit``)."""
        self.peers = peers
        rs = sigma if ratio_sigma is None else ratio_sigma
        self.noise = NoiseState(model or ArModel(), rs[groups.astype(np.int64)].astype(np.float64),
                                design, tail, fallback)
        # per-column bias allowance subtracted from z (a self-baseline's offset uncertainty)
        self.allowance = (None if allowance is None or not np.any(allowance)
                          else allowance.astype(np.float32))
        self.groups = groups.astype(np.int64)
        ng = int(self.groups.max()) + 1 if groups.size else 0
        self.members = [np.flatnonzero(self.groups == g) for g in range(ng)]
        self.sigma = sigma[self.groups].astype(np.float32)
        n = groups.size
        self.tests = [_Cusum(n, d.k, d.clip, d.h) for d in self.noise.designs]
        self.estimator = _Cusum(n, ESTIMATOR_K, ESTIMATOR_K + 4.0, float("inf"))
        self.shift = ShiftTest(n, self.noise.shift_c)
        self.recovery = Recovery(n)
        self.alarm_step = np.full(n, -1, dtype=np.int64)
        self.alarm_since = np.full(n, -1, dtype=np.int64)
        self.alarm_det = np.full(n, -1, dtype=np.int8)
        self.alarm_score = np.zeros(n)
        self.alarm_sums = np.zeros((2, n))
        self.alarm_peak = np.zeros(n)
        self.alarm_held = np.full(n, np.nan)
        self.alarm_count = np.zeros(n)  # the excursion's values when it alarmed
        self.last_step = np.full(n, -1, dtype=np.int64)
        self.medians: list[float] = []
        #: per rank: sum of its (clipped) log-ratios and how many, over every step tested
        self.total_r = np.zeros(n)
        self.total_n = np.zeros(n)
        self.recent = np.full((RECENT, n), np.nan, dtype=np.float32)
        self._recent_at = 0

    def update(self, x: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Process ``x`` (len(steps), ranks) seconds; returns the ranks newly alarmed."""
        return self.update_ratio(self.ratios(x), steps)

    def ratios(self, x: np.ndarray, node: bool = False) -> np.ndarray:
        """The peer log-ratios of ``x`` (and the typical value of the series, kept for costs);
        with ``node`` the node test's ratios are kept in ``node_ratios`` (None otherwise)."""
        self.node_ratios: np.ndarray | None = None
        if self.peers is not None:
            r, self.node_ratios, typical_log = self.peers.ratio(log_times(x), node)
            typical = np.exp(typical_log)
        else:
            r, med = peer_log_ratio(x, self.groups, self.members)
            typical = np.exp(np.median(med, axis=1))
            self.node_ratios = r if node else None
        self.medians.extend(typical[np.isfinite(typical)].tolist())
        return r

    def update_ratio(self, r: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Test log-ratios ``r`` (modified in place); returns the columns newly alarmed. The
        noise model is refitted as the job runs (``whiten.NoiseState``), between steps fixed
        by the count of steps tested, so any split into blocks gives the same answer."""
        new = []
        start = 0
        while start < r.shape[0]:
            stop = min(r.shape[0], start + self.noise.until_refit())
            new.append(self._update(r[start:stop], steps[start:stop]))
            if self.noise.tested(stop - start):
                self.sigma *= np.float32(self.noise.refit(self.recent_rows(), self.alarm_step < 0))
                self.shift.c = self.noise.shift_c  # the threshold is the model's (``shift.py``)
                for t, d in zip(self.tests, self.noise.designs, strict=True):
                    t.h = d.h
            start = stop
        return np.concatenate(new) if len(new) != 1 else new[0]

    def _update(self, r: np.ndarray, steps: np.ndarray) -> np.ndarray:
        ok = np.isfinite(r)
        missing: np.ndarray | None = None if ok.all() else ~ok
        if missing is not None:
            np.copyto(r, np.float32(0.0), where=missing)
        z = self.noise.innovations(r, missing) / self.sigma
        if self.allowance is not None:
            z -= self.allowance
        np.maximum(r, R_LOW, out=r)
        np.minimum(r, R_HIGH, out=r)
        n_steps, n_cols = r.shape
        cum_r = np.empty(r.shape, dtype=np.float32)
        _running_sum(r, cum_r)
        if missing is None:
            cum_n = np.broadcast_to(np.arange(1, n_steps + 1, dtype=np.float32)[:, None], r.shape)
        else:
            cum_n = np.empty(r.shape, dtype=np.float32)
            _running_sum(ok.astype(np.float32), cum_n)
        self.total_r += cum_r[-1]
        self.total_n += cum_n[-1]
        tests = (*self.tests, self.estimator)
        for t in tests:  # an excursion opening in this block starts at its first step
            fresh = t.s <= 0.0
            np.copyto(t.start, steps[0], where=fresh)
        runs = [t.run(z, missing, r, None if missing is None else ok, (cum_r, cum_n))
                for t in tests]
        waiting = self.alarm_step < 0
        first, which = self._first_alarms(runs, waiting, n_steps)
        sh = None if self.noise.model.white else self.shift.merge(  # level shift: ``shift.py``
            z, r, None if missing is None else ok, steps, self.noise.model, waiting, first, which)
        new = np.flatnonzero(first < n_steps)
        cols = (cum_r, cum_n)
        if new.size:
            ta = first[new]
            det = which[new]
            since, sums = self._excursion(self.tests[0], runs[0][0], ta, new, cols, steps)
            for d in range(1, len(self.tests)):
                s_d, u_d = self._excursion(self.tests[d], runs[d][0], ta, new, cols, steps)
                pick = det == d
                since[pick], sums[:, pick] = s_d[pick], u_d[:, pick]
            # a large shift is dated by the estimation-only CUSUM tuned to it (its k is closer
            # to half the shift, so pre-onset noise is not absorbed into the excursion)
            est = runs[-1][0]
            s_e, u_e = self._excursion(self.estimator, est, ta, new, cols, steps)
            shift = u_e[0] / np.maximum(u_e[1], 1) / self.sigma[new].astype(np.float64)
            sharp = (est[ta, new] > 0) & (shift >= 2 * self.estimator.k)
            since[sharp], sums[:, sharp] = s_e[sharp], u_e[:, sharp]
            if sh is not None:
                pick = det == 2
                since[pick], sums[:, pick] = sh[1][new[pick]], sh[2][:, new[pick]]
            self.alarm_since[new] = since
            self.alarm_peak[new] = sums[0] / np.maximum(sums[1], 1.0)
            self.alarm_count[new] = sums[1]
            self.alarm_held[new] = held_peak(sums, r, ok, steps, since, ta, new, np.roll(
                self.recent[:, new], -self._recent_at, axis=0), RECENT)
            self.alarm_sums[0, new] = sums[0] + cum_r[-1, new] - cum_r[ta, new]
            self.alarm_sums[1, new] = sums[1] + cum_n[-1, new] - cum_n[ta, new]
            self.alarm_det[new] = det
            # the score is over the alarm tests only: ``runs`` ends with the estimator's run
            # (h = inf), so it is indexed by test, never zipped against ``self.tests``
            self.alarm_score[new] = np.max(
                [runs[d][0][ta, new] / t.h for d, t in enumerate(self.tests)]
                + ([] if sh is None else [sh[3][new]]), axis=0)
            self.alarm_step[new] = steps[ta]
        self._keep_recent(r, missing)  # after the new alarms: their steps before this block
        old = np.flatnonzero(~waiting)
        if old.size:
            self.alarm_sums[0, old] += cum_r[-1, old]
            self.alarm_sums[1, old] += cum_n[-1, old]
        for (stat, last, acc_r, acc_n), t in zip(runs, tests, strict=True):
            t.carry(stat, last, acc_r, acc_n, steps)
        self._seen(r, steps, ok, missing)
        return new

    def _first_alarms(self, runs: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                      waiting: np.ndarray,
                      n_steps: int) -> tuple[np.ndarray, np.ndarray]:
        """Per rank still waiting: the block row of its first alarm over the alarm tests
        (``n_steps``: none) and which test raised it (-1: none)."""
        first = np.full(waiting.size, n_steps, dtype=np.int64)
        which = np.full(waiting.size, -1, dtype=np.int8)
        for d, t in enumerate(self.tests):
            stat = runs[d][0]
            cand = np.flatnonzero(waiting & (stat.max(axis=0) > t.h))
            if cand.size:
                at = (stat[:, cand] > t.h).argmax(axis=0)
                better = at < first[cand]
                first[cand[better]] = at[better]
                which[cand[better]] = d
        return first, which

    def _seen(self, r: np.ndarray, steps: np.ndarray, ok: np.ndarray,
              missing: np.ndarray | None) -> None:
        """After a block: its ratios into the noise model's variogram (a rank's rows from its
        alarm on are not noise any more) and each rank's last step with a value."""
        gone = self.alarm_step >= 0
        after = (steps[:, None] >= self.alarm_step[None, :]) & gone if gone.any() else None
        self.noise.add(r, missing, after)
        self.recovery.add(r, missing, after)
        if missing is None:
            self.last_step[:] = steps[-1]
        else:
            seen = ok.any(axis=0)
            last_ok = steps.size - 1 - ok[::-1].argmax(axis=0)
            self.last_step[seen] = steps[last_ok[seen]]

    @staticmethod
    def _excursion(t: _Cusum, stat: np.ndarray, ta: np.ndarray, sel: np.ndarray,
                   cum: tuple[np.ndarray, np.ndarray], steps: np.ndarray,
                   ) -> tuple[np.ndarray, np.ndarray]:
        """First step and (sum r, n) of ``t``'s excursion open at block row ``ta``."""
        j = _last_zero(stat, ta, sel)
        inside = j >= 0
        jj = np.maximum(j, 0)
        since = np.where(inside, steps[np.minimum(j + 1, steps.size - 1)], t.start[sel])
        out = np.empty((2, sel.size))
        for i, (c, carry) in enumerate(zip(cum, (t.sum_r, t.sum_n), strict=True)):
            out[i] = c[ta, sel] - np.where(inside, c[jj, sel], 0.0) + np.where(inside, 0.0, carry[sel])
        return since, out

    def _keep_recent(self, r: np.ndarray, missing: np.ndarray | None) -> None:
        rows = r[-RECENT:]
        if missing is not None:
            rows = np.where(missing[-RECENT:], np.float32(np.nan), rows)
        idx = (self._recent_at + np.arange(rows.shape[0])) % RECENT
        self.recent[idx] = rows
        self._recent_at = int((self._recent_at + rows.shape[0]) % RECENT)

    def recent_rows(self) -> np.ndarray:
        """The last ``RECENT`` tested steps' clipped log-ratios (oldest first; NaN: missing or
        not yet tested)."""
        return np.roll(self.recent, -self._recent_at, axis=0)

    def alarms(self) -> Alarms:
        """The standard error of the mean log-ratio since onset: the rank's ratio noise over
        sqrt(steps) when steps are independent given the peer median, widened by the AR part
        of the noise model (``ArModel.sum_var``) when there is one."""
        idx = np.flatnonzero(self.alarm_step >= 0)
        total, cnt = self.alarm_sums[:, idx]
        n = np.maximum(cnt, 1)
        se = self.noise.mean_se(idx, n)
        return Alarms(idx, self.alarm_since[idx], self.alarm_step[idx], self.alarm_det[idx],
                      self.alarm_score[idx], total / n, se, self.alarm_peak[idx],
                      self.alarm_held[idx], after_onset(total, cnt, self.alarm_peak[idx],
                                                        self.alarm_count[idx]))

    def typical_seconds(self) -> float:
        v = np.asarray(self.medians)
        v = v[np.isfinite(v)]
        return float(np.median(v)) if v.size else float("nan")

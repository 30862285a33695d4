"""Incremental sequential test for one timing series (compute or communication).

Per step, each rank's log time is compared with the median of its peer group at that step
(``r = log x - median_peers(log x)``: drift, checkpoint steps and anything else shared by the
group cancel), standardised by the group's robust noise (``z = r / sigma``) and fed to the two
CUSUMs of ``stragglers_calib.design``. State is a handful of arrays of length ``ranks``:
``update`` costs two medians and ~20 vector operations per step, whatever the history length,
so streaming a live job and analysing a whole file are the same code.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from minutiae.analyses.stragglers_types import Design

#: per-step log-ratio bounds used for the slowdown estimate (a 1-step 10x pause counts as e^1)
R_LOW, R_HIGH = -0.5, 1.0


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


class SeriesDetector:
    """CUSUM bank over the ranks of one timing series; feed it blocks of steps in order."""

    def __init__(self, groups: np.ndarray, sigma: np.ndarray, design: Design) -> None:
        self.groups = groups.astype(np.int64)
        ng = int(self.groups.max()) + 1 if groups.size else 0
        self.members = [np.flatnonzero(self.groups == g) for g in range(ng)]
        self.sigma = sigma[self.groups].astype(np.float32)
        fast, slow = design.detectors
        self.fast, self.slow = fast, slow
        n = groups.size
        self.s_fast = np.zeros(n)
        self.s_slow = np.zeros(n)
        self.z_prev = np.zeros(n)
        # per detector (0 fast, 1 slow): sums of r over the current CUSUM excursion
        self.acc_sum = np.zeros((2, n))
        self.acc_sq = np.zeros((2, n))
        self.acc_n = np.zeros((2, n), dtype=np.int64)
        self.acc_start = np.full((2, n), -1, dtype=np.int64)
        self.alarm_sum = np.zeros(n)
        self.alarm_sq = np.zeros(n)
        self.alarm_n = np.zeros(n, dtype=np.int64)
        self.alarm_step = np.full(n, -1, dtype=np.int64)
        self.alarm_since = np.full(n, -1, dtype=np.int64)
        self.alarm_det = np.full(n, -1, dtype=np.int8)
        self.alarm_score = np.zeros(n)
        self.last_step = np.full(n, -1, dtype=np.int64)
        self.medians: list[float] = []

    def update(self, x: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Process ``x`` (len(steps), ranks) seconds; returns the ranks newly alarmed."""
        r, med = peer_log_ratio(x, self.groups, self.members)
        z = r / self.sigma
        fresh: list[np.ndarray] = []
        kf, cf, hf = self.fast.k, self.fast.clip, self.fast.h
        ks, cs, hs = self.slow.k, self.slow.clip, self.slow.h
        with np.errstate(invalid="ignore"):
            typical = np.exp(np.median(med, axis=1))
            self.medians.extend(typical[np.isfinite(typical)].tolist())
            for i, step in enumerate(steps.tolist()):
                zt = z[i].astype(np.float64)
                ok = np.isfinite(zt)
                zt = np.where(ok, zt, 0.0)
                y = np.minimum(zt, self.z_prev) if self.fast.confirm else zt
                sf = np.maximum(0.0, self.s_fast + np.clip(y, -cf, cf) - kf)
                ss = np.maximum(0.0, self.s_slow + np.clip(zt, -cs, cs) - ks)
                self.s_fast = np.where(ok, sf, self.s_fast)
                self.s_slow = np.where(ok, ss, self.s_slow)
                self.z_prev = np.where(ok, zt, self.z_prev)
                alarmed = self.alarm_step >= 0
                rt = np.clip(np.where(ok, r[i], 0.0), R_LOW, R_HIGH)
                quiet = np.stack([self.s_fast == 0.0, self.s_slow == 0.0])
                grow = ok & ~quiet
                begin = grow & (self.acc_n == 0)
                self.acc_start[1, begin[1]] = step
                # the fast test sees min(z_t, z_t-1): its excursion starts one step late
                prev = np.where(self.last_step >= 0, self.last_step, step)
                self.acc_start[0, begin[0]] = prev[begin[0]]
                self.acc_sum = np.where(quiet, 0.0, self.acc_sum + np.where(grow, rt, 0.0))
                self.acc_sq = np.where(quiet, 0.0, self.acc_sq + np.where(grow, rt * rt, 0.0))
                self.acc_n = np.where(quiet, 0, self.acc_n + grow)
                if alarmed.any():
                    live = alarmed & ok
                    self.alarm_sum += np.where(live, rt, 0.0)
                    self.alarm_sq += np.where(live, rt * rt, 0.0)
                    self.alarm_n += live
                hit = ~alarmed & ((self.s_fast > hf) | (self.s_slow > hs))
                if hit.any():
                    idx = np.flatnonzero(hit)
                    ratio_f = self.s_fast[idx] / hf
                    ratio_s = self.s_slow[idx] / hs
                    det = np.where(ratio_f >= 1.0, 0, 1)
                    self.alarm_step[idx] = step
                    self.alarm_det[idx] = det
                    self.alarm_score[idx] = np.maximum(ratio_f, ratio_s)
                    self.alarm_since[idx] = self.acc_start[det, idx]
                    self.alarm_sum[idx] = self.acc_sum[det, idx]
                    self.alarm_sq[idx] = self.acc_sq[det, idx]
                    self.alarm_n[idx] = self.acc_n[det, idx]
                    fresh.append(idx)
                self.last_step[ok] = step
        return np.concatenate(fresh) if fresh else np.empty(0, dtype=np.int64)

    def alarms(self) -> Alarms:
        idx = np.flatnonzero(self.alarm_step >= 0)
        n = np.maximum(self.alarm_n[idx], 1)
        mean = self.alarm_sum[idx] / n
        var = np.maximum(self.alarm_sq[idx] / n - mean * mean, 0.0)
        se = np.sqrt(var / np.maximum(n - 1, 1))
        return Alarms(idx, self.alarm_since[idx], self.alarm_step[idx], self.alarm_det[idx],
                      self.alarm_score[idx], mean, se)

    def typical_seconds(self) -> float:
        v = np.asarray(self.medians)
        v = v[np.isfinite(v)]
        return float(np.median(v)) if v.size else float("nan")

"""Who a rank is compared with: the peers doing the same work, never itself or its own node.

Each rank's per-step log-ratio is ``r = log x - reference``. The reference of the ranks of one
peer group (pipeline stage x role) on one node (a *unit*; a rank is its own unit when the input
names no node) is:

1. **same work elsewhere**: the median log time of the group's ranks on *other* nodes. Leaving
   the unit out matters in small groups: with the unit inside, a rank of an 8-rank group is one
   of the two middle values a quarter of the time, so ``r`` is a peaked, heavy-tailed mixture
   whose MAD understates its tails (the measured cause of the simulator's false alarms), and a
   slow node that is half of its group drags the reference half-way with it (a 2-rank stage
   showed half the slowdown). Without the unit ``r = e_i - median(e_others)`` is close to
   Gaussian with variance ``sigma^2 (1 + ~pi / (2 (m - 1)))``, which is what calibration measures.
2. **self-baseline** when the group has no rank on another node (a pipeline stage that is one
   node, e.g. 4 stages on 4 nodes): the median log time of *every* rank on other nodes plus the
   unit's own calibrated offset (its median ratio to them over the warm-up). Stage imbalance is
   constant and lands in the offset; drift, checkpoints and sequence-length variance are shared
   and cancel; a node that becomes slower than it was is seen (before, its ranks were compared
   only with each other, so a slow one-node stage was invisible). The offset is estimated from
   the warm-up, so it is off by a few tenths of a percent: a persistent bias the tests would
   accumulate. Its standard error is kept (``offset_error``) and the tests of these ranks
   subtract ``BIAS_Z`` standard errors from every increment (``stragglers.BIAS_Z``).

Groups above ``LOO_MAX`` ranks use their plain (sampled) median: one node moves the median of
hundreds of ranks by a negligible amount, and this keeps 100,000 ranks in the columnar path.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from minutiae.analyses.stragglers.calib import noise_sigma
from minutiae.analyses.stragglers.medians import fast_median, group_medians

LOO_MAX = 64


class Kind(Enum):
    """How the ranks of one unit (a node's ranks of one peer group) are referenced."""

    OTHERS = "others"      # the group's ranks on other nodes
    WITHIN = "within"      # the group is this node: the other ranks of the node (rank tests);
    #                        the node test uses the self-baseline
    BASELINE = "baseline"  # a lone rank with no same-work peer: the self-baseline


def _median(sub: np.ndarray, axis: int = -1) -> np.ndarray:
    return fast_median(sub, axis=axis)


def loo_median(sub: np.ndarray) -> np.ndarray:
    """Median of the other values of the last axis for every value (leave-one-out), from one
    sort: removing a value below the middle leaves the upper middle, and so on. NaN-aware by a
    slower path (each column's nanmedian of the others)."""
    n = sub.shape[-1]
    if np.isnan(sub).any():
        out = np.empty_like(sub)
        for i in range(n):
            out[..., i] = _median(np.delete(sub, i, axis=-1))
        return out
    order = np.argsort(sub, axis=-1, kind="stable")
    srt = np.take_along_axis(sub, order, axis=-1)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.arange(n), axis=-1)
    if n % 2 == 0:  # n - 1 others: one middle value
        m = n // 2
        lo, hi = srt[..., m - 1:m], srt[..., m:m + 1]
        return np.where(pos < m, hi, lo)
    m = (n - 1) // 2
    a, b, c = srt[..., m - 1:m], srt[..., m:m + 1], srt[..., m + 1:m + 2]
    return np.asarray(np.where(pos < m, (b + c) / 2, np.where(pos > m, (a + b) / 2, (a + c) / 2)))


@dataclass(frozen=True, slots=True)
class _Bucket:
    """Units of one kind whose peer sets have the same size: one gather and one median."""

    mine: list[np.ndarray]
    peers: np.ndarray  # (units, peers) column indices
    pair: list[int]    # index of each unit in ``PeerReference.pairs``


class PeerReference:
    """The reference of every rank (see the module docstring); ``units`` are node indices (a
    rank is its own unit when its node is unknown). Calibrate with ``fit`` on the warm-up."""

    def __init__(self, groups: np.ndarray, units: np.ndarray) -> None:
        self.groups = groups.astype(np.int64)
        n = groups.size
        ng = int(self.groups.max()) + 1 if n else 0
        if n and np.unique(units).size == 1:  # one node: compare ranks with each other
            units = np.arange(n)
        self.n = n
        self.members = [np.flatnonzero(self.groups == g) for g in range(ng)]
        self.large = [cols for cols in self.members if cols.size > LOO_MAX]
        #: (columns of the unit in its group, peer columns for the reference, kind)
        self.pairs: list[tuple[np.ndarray, np.ndarray, Kind]] = []
        everyone = np.arange(n)
        for cols in self.members:
            if cols.size > LOO_MAX:
                continue
            for u in np.unique(units[cols]):
                mine = cols[units[cols] == u]
                peers = cols[units[cols] != u]
                if peers.size:
                    self.pairs.append((mine, peers, Kind.OTHERS))
                    continue
                kind = Kind.WITHIN if mine.size >= 2 else Kind.BASELINE
                self.pairs.append((mine, everyone[units != u], kind))
        self.offset = np.zeros(len(self.pairs))
        self.offset_se = np.zeros(len(self.pairs))
        self.buckets = self._buckets()
        self.within = [(j, mine) for j, (mine, _, k) in enumerate(self.pairs) if k is Kind.WITHIN]
        self.baseline_ranks = int(sum(m.size for m, _, k in self.pairs if k is not Kind.OTHERS))

    def _buckets(self) -> list[_Bucket]:
        by: dict[int, list[int]] = {}
        for j, (_, peers, _) in enumerate(self.pairs):
            by.setdefault(peers.size, []).append(j)
        return [_Bucket([self.pairs[j][0] for j in js], np.stack([self.pairs[j][1] for j in js]), js)
                for _, js in sorted(by.items()) if _ > 0]

    def ratio(self, logx: np.ndarray, node: bool = False,
              ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """``log x - reference`` (steps, ranks) for the rank tests, computed in place in
        ``logx``; with ``node``, also the ratios the node test takes its medians of (they differ
        only for WITHIN units, whose node is compared with the self-baseline); and the typical
        log time of each step."""
        stride = max(1, logx.shape[1] // 4096)
        typical = _median(logx[:, ::stride])
        ref = np.zeros((logx.shape[0], len(self.pairs)), dtype=np.float64)
        for b in self.buckets:
            ref[:, b.pair] = _median(logx[:, b.peers], axis=2)
        ref += self.offset
        within = [loo_median(logx[:, mine]) for _, mine in self.within]
        node_r: np.ndarray | None = None
        if node and self.within:
            node_r = np.empty_like(logx)
            for j, mine in self.within:
                node_r[:, mine] = logx[:, mine] - ref[:, j:j + 1].astype(logx.dtype)
        if self.large:
            big = group_medians(logx, self.large)
            for j, cols in enumerate(self.large):
                if cols[-1] - cols[0] + 1 == cols.size:
                    logx[:, int(cols[0]):int(cols[-1]) + 1] -= big[:, j:j + 1]
                else:
                    logx[:, cols] -= big[:, j:j + 1]
        for j, (mine, _, kind) in enumerate(self.pairs):
            if kind is not Kind.WITHIN:
                logx[:, mine] -= ref[:, j:j + 1].astype(logx.dtype)
        for (_, mine), loo in zip(self.within, within, strict=True):
            logx[:, mine] -= loo
        if node_r is not None:
            keep = np.ones(self.n, dtype=bool)
            for _, mine in self.within:
                keep[mine] = False
            node_r[:, keep] = logx[:, keep]
        elif node:
            node_r = logx
        return logx, node_r, typical

    def fit(self, logx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Offsets of the self-baseline units: their median ratio to the reference over the
        warm-up (``logx`` is not modified), and each offset's standard error: 1.2533 x the noise
        of the unit's per-step median ratio / sqrt(steps) (the steps are independent; the
        ranks of one step share the reference's error, so they are not counted as separate).
        Returns the warm-up's ratios for the rank tests and the node test, as ``ratio``."""
        self.offset[:] = 0.0
        rank_r, r, _ = self.ratio(logx.copy(), node=True)
        assert r is not None
        for j, (mine, _, kind) in enumerate(self.pairs):
            if kind is not Kind.OTHERS:
                d = r[:, mine]
                flat = d[np.isfinite(d)]
                self.offset[j] = float(np.median(flat)) if flat.size else 0.0
                s, n = noise_sigma(_median(d))
                self.offset_se[j] = 1.2533 * s / np.sqrt(n) if n >= 2 and np.isfinite(s) else 0.0
                # the ratios with the offsets, as ``ratio`` gives them from now on
                if kind is Kind.BASELINE:
                    rank_r[:, mine] -= np.float32(self.offset[j])
                if r is not rank_r:
                    r[:, mine] -= np.float32(self.offset[j])
        return rank_r, r

    def offset_error(self, node: bool = False) -> np.ndarray:
        """Each rank's offset standard error in log units for the rank tests (only BASELINE
        ranks have one) or, with ``node``, for the node test (WITHIN units too)."""
        out = np.zeros(self.n)
        for j, (mine, _, kind) in enumerate(self.pairs):
            if kind is Kind.BASELINE or (node and kind is Kind.WITHIN):
                out[mine] = self.offset_se[j]
        return out

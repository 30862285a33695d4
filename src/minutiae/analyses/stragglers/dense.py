"""Timing files of the common layout straight into the matrix (pure: blocks of columns in, a
``TimingMatrix`` or None out).

Most timing files hold one row per (step, rank) and only step, rank and seconds, the rows in
step order with the same ascending ranks every step: what a logger gathering each step writes,
and what the simulator and ``bench/stragglers`` write. For such a file the long table is never
built: ``read.read_matrix`` hands its columns over a block at a time (a Parquet row group, a
slice of a CSV column), each block is checked against that layout and its seconds copied into
the matrix, and nothing else is kept (100,000 ranks x 1,000 steps: the 400 MB matrix and one
block, where the long table and its repairs took 10 GB).

Anything else - another row order, a missing or repeated (step, rank), a bad value, a step
going back, a column the analysis uses besides the three (node, gpu, stage, section, ...) -
gives None and the file takes the general path (``runs.analyse_runs`` on the long table),
which reports every repair. A file this path accepts gets the matrix and warnings
``prep.prepare`` gives it, to the bit (``tests/analyses/stragglers/test_dense.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from minutiae.analyses.stragglers.prep import (
    MAX_RANK_ID,
    TimingMatrix,
    few_ids,
    leaves,
    ms_ranks,
    stage_codes,
    steps_only,
)
from minutiae.analyses.stragglers.table import HUGE_SECONDS, TINY_SECONDS

__all__ = ["COLUMNS", "KEYS", "DenseGrid", "plain_columns", "with_keys"]

#: the columns every timing file has, and the per-rank columns taken from its first step
COLUMNS = ("step", "rank", "seconds")
KEYS = ("node", "gpu", "stage", "leaf")
#: ranks' medians are only needed (for the milliseconds check) when values span this factor
_MEDIAN_SPAN = 100.0
_MEDIAN_COLS = 4096


def plain_columns(names: list[str]) -> bool:
    """Whether a file with these column names can be read here: step, rank and seconds once
    each, every name canonical (nothing the general path would rename), no ``role`` (peer
    groups of stage and role together take the general path)."""
    return (len(set(names)) == len(names) and set(COLUMNS) <= set(names)
            and all(n == n.strip().lower() for n in names) and "role" not in names)


def with_keys(m: TimingMatrix, keys: Mapping[str, Sequence[str] | np.ndarray]) -> TimingMatrix:
    """``m`` with each rank's node, GPU, peer group and leaf from the first step's values of
    the file's per-rank columns, as ``prep`` takes them (``_meta``)."""
    n = m.ranks.size
    node = list(keys.get("node", [None] * n))
    stage = keys.get("stage")
    return dataclasses.replace(
        m, node=tuple(node), leaf=leaves(node, list(keys.get("leaf", [None] * n)), None),
        gpu=np.asarray(keys["gpu"]).astype(np.int64) if "gpu" in keys else m.gpu,
        stage=None if stage is None else stage_codes(
            np.array(stage, dtype=object) if isinstance(stage, list) else np.asarray(stage)))


class DenseGrid:
    """The matrix of a file of ``rows`` rows, fed in file order with :meth:`feed`; ``wide``:
    the seconds are float64 (kept so until the milliseconds check, as ``prepare`` does).
    ``keys`` are per-row columns that must repeat the first step's values every step: the
    rank first (ascending: the rank axis), then any per-rank column (node, GPU... as integer
    codes); ``fixed`` holds the first step's values of each."""

    def __init__(self, rows: int, wide: bool) -> None:
        self.rows = rows
        self.flat = np.empty(rows, dtype=np.float64 if wide else np.float32)
        self.at = 0
        self.fixed: list[np.ndarray] = []
        self.steps = np.zeros(0, dtype=np.int64)
        self.head: list[list[np.ndarray]] = []  # step and keys of the rows before step 1
        self.lo, self.hi = np.inf, -np.inf

    @property
    def ranks(self) -> np.ndarray | None:
        return self.fixed[0] if self.fixed else None

    def feed(self, step: np.ndarray, sec: np.ndarray, keys: list[np.ndarray]) -> bool:
        """Take the next rows; False as soon as they do not fit the layout (stop reading)."""
        n = sec.size
        if n == 0:
            return True
        if self.at + n > self.rows or not self._values(sec):
            return False
        self.flat[self.at:self.at + n] = sec
        start = self.at
        self.at += n
        if self.fixed:
            return self._rows(step, keys, start)
        self.head.append([a.copy() for a in (step, *keys)])
        cols = [np.concatenate(c) for c in zip(*self.head, strict=True)]
        change = np.flatnonzero(cols[0] != cols[0][0])
        if change.size == 0:
            return self.at < self.rows or self._axis(cols, self.rows)
        return self._axis(cols, int(change[0]))

    def _axis(self, cols: list[np.ndarray], width: int) -> bool:
        """The rank axis (and the other keys) from the first step's ``width`` rows; the rows
        so far checked."""
        self.head = []
        axis = cols[1][:width].astype(np.int64)
        if (self.rows % width or int(axis[0]) < 0 or int(axis[-1]) >= MAX_RANK_ID
                or not bool((axis[1:] > axis[:-1]).all())):
            return False
        self.fixed = [axis, *(c[:width] for c in cols[2:])]
        self.steps = np.empty(self.rows // width, dtype=np.int64)
        return self._rows(cols[0], cols[1:], 0)

    def _values(self, sec: np.ndarray) -> bool:
        """Every duration finite and plausible (compared as float64, as ``table`` does)."""
        lo, hi = float(sec.min()), float(sec.max())  # NaN propagates and fails below
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
        return lo >= TINY_SECONDS and hi <= HUGE_SECONDS

    def _rows(self, step: np.ndarray, keys: list[np.ndarray], start: int) -> bool:
        """Rows ``start..`` of the file: each row of the matrix one step (a number above the
        last), its keys the first step's in order."""
        width = self.fixed[0].size
        col = start % width
        first = min(step.size, width - col) if col else 0
        if first and not self._part(step[:first], [k[:first] for k in keys], start // width,
                                    col):
            return False
        full = (step.size - first) // width
        if full:
            cut = slice(first, first + full * width)
            s = step[cut].reshape(full, width)
            row0 = (start + first) // width
            lead = s[:, 0].astype(np.int64)
            if not (all(bool((k[cut].reshape(full, width) == f).all())
                        for k, f in zip(keys, self.fixed, strict=True))
                    and bool((s == s[:, :1]).all()) and int(lead[0]) > self._before(row0)
                    and bool((lead[1:] > lead[:-1]).all())):
                return False
            self.steps[row0:row0 + full] = lead
        rest = first + full * width
        return rest == step.size or self._part(step[rest:], [k[rest:] for k in keys],
                                               (start + rest) // width, 0)

    def _before(self, row: int) -> int:
        return int(self.steps[row - 1]) if row else -1

    def _part(self, step: np.ndarray, keys: list[np.ndarray], row: int, col: int) -> bool:
        """Part of one matrix row from column ``col`` (a block's first or last rows)."""
        value = int(step[0])
        if col == 0:
            if value <= self._before(row):
                return False
            self.steps[row] = value
        elif value != int(self.steps[row]):
            return False
        return bool((step == value).all()) and all(
            bool((k == f[col:col + k.size]).all()) for k, f in zip(keys, self.fixed, strict=True))

    def matrix(self) -> TimingMatrix | None:
        """The matrix, its warnings those of ``prepare``; None when the rows did not all come
        or never fitted."""
        if not self.fixed or self.at != self.rows or self.rows == 0:
            return None
        ranks = self.fixed[0]
        warnings: list[str] = []
        span = int(ranks[-1] - ranks[0] + 1)
        if span > ranks.size:
            gaps = np.setdiff1d(np.arange(ranks[0], ranks[-1] + 1), ranks)
            warnings.append(f"rank(s) {few_ids(gaps)} never reported")
        mat = self.flat.reshape(self.steps.size, ranks.size)
        ms = self._ms(mat, ranks, warnings)
        if ms.size and mat.dtype == np.float64:
            mat[:, ms] = np.divide(mat[:, ms], 1000.0)
        elif ms.size:  # rescaled in float64 and rounded once, as prepare does
            mat[:, ms] = (mat[:, ms].astype(np.float64) / 1000.0).astype(np.float32)
        total = mat if mat.dtype == np.float32 else mat.astype(np.float32)
        return steps_only(self.steps, ranks, total, warnings)

    def _ms(self, mat: np.ndarray, ranks: np.ndarray, warnings: list[str]) -> np.ndarray:
        """``prep.ms_ranks`` on each rank's median. When every value lies within a factor of
        100 of every other and under an hour, no rank's median can be 200x the job's and the
        job's is under 3,600 s: nothing to find, and the medians are not computed."""
        if self.hi < _MEDIAN_SPAN * self.lo and self.hi <= 3600.0:
            return np.zeros(0, dtype=np.int64)
        medians = np.concatenate([
            np.median(np.ascontiguousarray(mat[:, j:j + _MEDIAN_COLS].T, dtype=np.float64),
                      axis=1)
            for j in range(0, mat.shape[1], _MEDIAN_COLS)])
        return ms_ranks(medians, ranks, warnings)

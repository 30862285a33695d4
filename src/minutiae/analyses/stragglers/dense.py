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

import numpy as np

from minutiae.analyses.stragglers.prep import (
    MAX_RANK_ID,
    TimingMatrix,
    few_ids,
    ms_ranks,
    steps_only,
)
from minutiae.analyses.stragglers.table import HUGE_SECONDS, TINY_SECONDS

__all__ = ["COLUMNS", "DenseGrid", "plain_columns"]

#: the columns read; a file naming any of ``USED`` too takes the general path
COLUMNS = ("step", "rank", "seconds")
USED = frozenset({"section", "role", "node", "gpu", "stage", "leaf"})
#: ranks' medians are only needed (for the milliseconds check) when values span this factor
_MEDIAN_SPAN = 100.0
_MEDIAN_COLS = 4096


def plain_columns(names: list[str]) -> bool:
    """Whether a file with these column names holds step totals only, under canonical names
    (step, rank and seconds once each; nothing the general path would rename or use)."""
    return (len(set(names)) == len(names) and set(COLUMNS) <= set(names)
            and all(n == n.strip().lower() for n in names) and not USED & set(names))


class DenseGrid:
    """The matrix of a file of ``rows`` rows, fed in file order with :meth:`feed`; ``wide``:
    the seconds are float64 (kept so until the milliseconds check, as ``prepare`` does)."""

    def __init__(self, rows: int, wide: bool) -> None:
        self.rows = rows
        self.flat = np.empty(rows, dtype=np.float64 if wide else np.float32)
        self.at = 0
        self.ranks: np.ndarray | None = None  # the first step's ranks: the rank axis
        self.steps = np.zeros(0, dtype=np.int64)
        self.head: list[tuple[np.ndarray, np.ndarray]] = []  # rows before the first step ends
        self.lo, self.hi = np.inf, -np.inf

    def feed(self, step: np.ndarray, rank: np.ndarray, sec: np.ndarray) -> bool:
        """Take the next rows; False as soon as they do not fit the layout (stop reading)."""
        n = sec.size
        if n == 0:
            return True
        if self.at + n > self.rows or not self._values(sec):
            return False
        self.flat[self.at:self.at + n] = sec
        start = self.at
        self.at += n
        if self.ranks is not None:
            return self._rows(step, rank, start)
        self.head.append((step.copy(), rank.copy()))
        steps = np.concatenate([s for s, _ in self.head])
        change = np.flatnonzero(steps != steps[0])
        if change.size == 0:
            return self.at < self.rows or self._axis(steps, self.rows)
        return self._axis(steps, int(change[0]))

    def _axis(self, steps: np.ndarray, width: int) -> bool:
        """The rank axis from the first step's ``width`` rows; the rows so far checked."""
        ranks = np.concatenate([r for _, r in self.head]).astype(np.int64)
        self.head = []
        axis = ranks[:width]
        if (self.rows % width or int(axis[0]) < 0 or int(axis[-1]) >= MAX_RANK_ID
                or not bool((axis[1:] > axis[:-1]).all())):
            return False
        self.ranks = axis
        self.steps = np.empty(self.rows // width, dtype=np.int64)
        return self._rows(steps, ranks, 0)

    def _values(self, sec: np.ndarray) -> bool:
        """Every duration finite and plausible (compared as float64, as ``table`` does)."""
        lo, hi = float(sec.min()), float(sec.max())  # NaN propagates and fails below
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
        return lo >= TINY_SECONDS and hi <= HUGE_SECONDS

    def _rows(self, step: np.ndarray, rank: np.ndarray, start: int) -> bool:
        """Rows ``start..`` of the file: each row of the matrix one step (a number above the
        last), its ranks the axis in order."""
        assert self.ranks is not None
        width = self.ranks.size
        col = start % width
        first = min(step.size, width - col) if col else 0
        if first and not self._part(step[:first], rank[:first], start // width, col):
            return False
        full = (step.size - first) // width
        if full:
            s = step[first:first + full * width].reshape(full, width)
            r = rank[first:first + full * width].reshape(full, width)
            row0 = (start + first) // width
            lead = s[:, 0].astype(np.int64)
            if not (bool((r == self.ranks).all()) and bool((s == s[:, :1]).all())
                    and int(lead[0]) > self._before(row0)
                    and bool((lead[1:] > lead[:-1]).all())):
                return False
            self.steps[row0:row0 + full] = lead
        rest = first + full * width
        return rest == step.size or self._part(step[rest:], rank[rest:],
                                               (start + rest) // width, 0)

    def _before(self, row: int) -> int:
        return int(self.steps[row - 1]) if row else -1

    def _part(self, step: np.ndarray, rank: np.ndarray, row: int, col: int) -> bool:
        """Part of one matrix row from column ``col`` (a block's first or last rows)."""
        assert self.ranks is not None
        value = int(step[0])
        if col == 0:
            if value <= self._before(row):
                return False
            self.steps[row] = value
        elif value != int(self.steps[row]):
            return False
        return (bool((step == value).all())
                and bool((rank == self.ranks[col:col + rank.size]).all()))

    def matrix(self) -> TimingMatrix | None:
        """The matrix, its warnings those of ``prepare``; None when the rows did not all come
        or never fitted."""
        if self.ranks is None or self.at != self.rows or self.rows == 0:
            return None
        ranks = self.ranks
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

"""From the long timing table (DESIGN.md contract) to dense (steps, ranks) matrices.

Input columns: ``step,rank,seconds`` (or ``ms`` in milliseconds), optional ``node,gpu,stage,
role,leaf,section`` (``role``: expert group, data-parallel replica kind... ranks are compared
with those of the same stage and role); others are ignored (``table.normalise`` makes them
canonical). Rows whose ``section`` is empty/``step``/``total`` are step totals; other sections
are split into collective sections (all-reduce, all-gather, reduce-scatter, barrier, p2p,
wait, ...: ``is_comm``) and compute sections.

Every repair is reported in ``warnings`` (never silent): rows with missing, non-numeric, zero,
negative or implausibly large durations are skipped; duplicate (step, rank, section) rows keep
the last; a rank whose median is ~1000x its peers' is taken as milliseconds and converted;
rank ids that never report are named.
"""

from __future__ import annotations

import contextlib
import warnings as _warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from minutiae.analyses.stragglers.table import (
    HUGE_SECONDS,
    TINY_SECONDS,
    TOTAL_NAMES,
    is_comm,
    normalise,
    rising,
)
from minutiae.analyses.stragglers.types import Basis
from minutiae.errors import DataError

if TYPE_CHECKING:
    import polars as pl

#: rank ids are dense axis indices: a 16 M-rank job at most (a rank id of 2**32 allocated 32 GiB)
MAX_RANK_ID = 1 << 24

__all__ = ["TimingMatrix", "few_ids", "is_comm", "leaves", "log_times", "ms_ranks", "prepare",
           "prepare_steps", "stage_codes", "steps_only"]

MS_RATIO = (200.0, 5000.0)

@dataclass(frozen=True, slots=True)
class TimingMatrix:
    """Dense timings: ``total``/``compute``/``comm`` are (steps, ranks) float32 seconds, NaN where
    a rank did not report. ``comm`` is the raw collective time (it includes waiting for the
    slowest peer); ``compute`` equals ``total`` when no sections were given (``basis`` STEP)."""

    steps: np.ndarray
    ranks: np.ndarray
    total: np.ndarray
    compute: np.ndarray
    comm: np.ndarray | None
    node: tuple[str | None, ...]
    gpu: np.ndarray
    stage: np.ndarray | None
    leaf: tuple[str | None, ...]
    basis: Basis
    warnings: tuple[str, ...]

    def slice(self, start: int, stop: int) -> TimingMatrix:
        comm = None if self.comm is None else self.comm[start:stop]
        return TimingMatrix(self.steps[start:stop], self.ranks, self.total[start:stop],
                            self.compute[start:stop], comm, self.node, self.gpu, self.stage,
                            self.leaf, self.basis, self.warnings)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore", RuntimeWarning)
        yield


def log_times(x: np.ndarray) -> np.ndarray:
    """float32 log of durations; NaN where missing or <= 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logx: np.ndarray = np.log(x, dtype=np.float32)
        if not (x > 0).all():
            logx[~(x > 0)] = np.nan
    return logx


def few_ids(values: np.ndarray, n: int = 5) -> str:
    head = ", ".join(str(int(v)) for v in values[:n])
    return head + (f" ... ({values.size} in all)" if values.size > n else "")


def _unique_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, return_inverse=True)`` for non-negative integer ids without a sort when
    they are dense (a count per id) or already in order (ids change where rows change): the
    sort was most of the preparation of a 50,000-row file."""
    if a.size == 0:
        return np.unique(a, return_inverse=True)
    lo, hi = int(a.min()), int(a.max())
    if lo >= 0 and hi < 4 * a.size + 1024:
        present = np.bincount(a) > 0
        index = np.cumsum(present) - 1
        # int32 indices when they fit: half the memory of the row-length gather
        small = index.astype(np.int32) if hi < 1 << 31 else index
        return np.flatnonzero(present).astype(a.dtype), small[a]
    change = np.empty(a.size, dtype=bool)
    change[0] = True
    np.not_equal(a[1:], a[:-1], out=change[1:])
    if bool((a[1:] >= a[:-1]).all()):
        return a[change], np.cumsum(change) - 1
    return np.unique(a, return_inverse=True)


def _rank_medians(ri: np.ndarray, sec: np.ndarray, n_r: int) -> np.ndarray:
    """Median of ``sec`` per rank index (NaN for a rank without rows), one sort."""
    out = np.full(n_r, np.nan)
    if ri.size == 0:
        return out
    order = np.lexsort((sec, ri))
    r_s, v_s = ri[order], sec[order]
    counts = np.bincount(r_s, minlength=n_r)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    has = counts > 0
    lo = starts[has] + (counts[has] - 1) // 2
    hi = starts[has] + counts[has] // 2
    out[has] = (v_s[lo] + v_s[hi]) / 2.0
    return out


def ms_ranks(medians: np.ndarray, ranks: np.ndarray, warnings: list[str]) -> np.ndarray:
    """Indices of the ranks whose median duration is ~1000x their peers' (taken as
    milliseconds), from each rank's median step total (or median row when no totals)."""
    keep = np.isfinite(medians)
    m = medians[keep]
    overall = float(np.median(m)) if m.size else 0.0
    none = np.zeros(0, dtype=np.int64)
    if overall <= 0:
        return none
    ratio = m / overall
    hit: np.ndarray = np.flatnonzero(keep)[(ratio >= MS_RATIO[0]) & (ratio <= MS_RATIO[1])]
    if hit.size and hit.size < m.size / 2:
        warnings.append(f"rank(s) {few_ids(np.sort(ranks[hit]))} report ~1000x their peers' "
                        "durations: taken as milliseconds and converted to seconds")
        return hit
    if overall > 3600:
        warnings.append(f"median step time is {overall:.0f} s: if these are milliseconds, name "
                        "the column 'ms' instead of 'seconds'")
    return none


def _checked_ranks(rank: np.ndarray, where: str) -> np.ndarray:
    """``rank``, or ``DataError`` naming a rank id no job has (the rank axis is dense)."""
    if rank.size and (int(rank.min()) < 0 or int(rank.max()) >= MAX_RANK_ID):
        bad = int(rank.max()) if int(rank.max()) >= MAX_RANK_ID else int(rank.min())
        raise DataError(f"rank id {bad} is outside 0..{MAX_RANK_ID - 1}", where)
    return rank


def _dense(lin: np.ndarray, sec: np.ndarray, mask: np.ndarray | None, shape: tuple[int, int],
           in_order: bool, single: bool) -> np.ndarray | None:
    """The (steps, ranks) matrix of the rows in ``mask`` (None: every row), NaN where none:
    one row per (step, rank) in order is the column itself; ``single`` (one section name of
    this kind: no two rows share a cell) a scatter; else repeated cells summed."""
    if (mask is None and lin.size == 0) or (mask is not None and not mask.any()):
        return None
    if in_order and (mask is None or mask.all()):
        return sec.reshape(shape)
    at, value = (lin, sec) if mask is None else (lin[mask], sec[mask])
    n = shape[0] * shape[1]
    if single:
        out = np.full(n, np.nan)
        out[at] = value
        return out.reshape(shape)
    total = np.bincount(at, weights=value, minlength=n)
    count = np.bincount(at, minlength=n)
    return np.where(count > 0, total, np.nan).reshape(shape)


def _matrices(lin: np.ndarray, sec: np.ndarray, codes: np.ndarray, names: list[str],
              shape: tuple[int, int]) -> list[np.ndarray | None]:
    """Float64 (steps, ranks) step totals, compute and collective sections (None: no row of
    that kind). One row per (step, rank) in step-then-rank order (a logger's or the
    simulator's file) is the column itself, no scatter (1.75 s of a 10,000 x 2,000 Parquet)."""
    kinds = np.array([0 if s.lower() in TOTAL_NAMES else (2 if is_comm(s) else 1) for s in names])
    in_order = lin.size == shape[0] * shape[1] > 0 and int(lin[0]) == 0 and rising(lin) and (
        int(lin[-1]) == lin.size - 1)
    if kinds.size == 1:  # every row of one kind, one row per cell: no mask, no kind per row
        out: list[np.ndarray | None] = [None, None, None]
        out[int(kinds[0])] = _dense(lin, sec, None, shape, in_order, True)
        return out
    kind = kinds[codes] if codes.size else np.zeros(0, int)
    return [_dense(lin, sec, kind == k, shape, in_order, int((kinds == k).sum()) == 1)
            for k in (0, 1, 2)]


def plain_units(lo: float, hi: float) -> bool:
    """Whether durations between ``lo`` and ``hi`` leave nothing for ``ms_ranks`` to find:
    within a factor of 100 of each other no rank's median is 200x the job's, and under an
    hour the job's median is not. Then no median is computed (10,000 partitions of a rank
    axis with a gap cost 6 s)."""
    return hi < 100.0 * lo and hi <= 3600.0


def _units(tot: np.ndarray | None, ri: np.ndarray, sec: np.ndarray, ranks: np.ndarray,
           warnings: list[str]) -> np.ndarray:
    """``ms_ranks`` from each rank's median step total (median row when no totals)."""
    values = tot if tot is not None else sec
    with np.errstate(all="ignore"), _quiet():
        if plain_units(float(np.nanmin(values)), float(np.nanmax(values))):
            return np.zeros(0, dtype=np.int64)
        if tot is None:
            medians = _rank_medians(ri, sec, ranks.size)
        else:
            medians = np.nanmedian(tot, axis=0) if np.isnan(tot).any() else np.median(tot, axis=0)
    return ms_ranks(medians, ranks, warnings)


def _rank_axis(rank: np.ndarray, ranks: np.ndarray | None, warnings: list[str],
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rank axis, each row's index into it and whether its rank is on it; ``ranks`` fixes
    the axis (streaming)."""
    if ranks is None:
        ranks_u, ri = _unique_inverse(rank)
        ranks_u = ranks_u.astype(np.int64, copy=False)
        span = int(ranks_u[-1] - ranks_u[0] + 1)
        if span > ranks_u.size:
            gaps = np.setdiff1d(np.arange(ranks_u[0], ranks_u[-1] + 1), ranks_u)
            warnings.append(f"rank(s) {few_ids(gaps)} never reported")
        return ranks_u, ri, np.ones(rank.size, dtype=bool)
    ri = np.clip(np.searchsorted(ranks, rank), 0, ranks.size - 1)
    known = ranks[ri] == rank
    if not known.all():
        warnings.append(f"rows of {np.unique(rank[~known]).size} rank(s) unseen during "
                        "calibration skipped")
    return ranks, ri, known


def prepare(df: pl.DataFrame, where: str, leaf_of: Mapping[str, str] | None = None,
            ranks: np.ndarray | None = None) -> TimingMatrix:
    """The dense matrices of ``df``; ``ranks`` fixes the rank axis (streaming: rows of unknown
    ranks are skipped with a warning)."""
    warnings: list[str] = []
    df, codes, names = normalise(df, where, warnings)
    rank = _checked_ranks(df["rank"].to_numpy(), where)
    sec = df["seconds"].to_numpy().astype(np.float64)
    steps_u, si = _unique_inverse(df["step"].to_numpy())
    steps_u = steps_u.astype(np.int64, copy=False)
    ranks_u, ri, known = _rank_axis(rank, ranks, warnings)
    n_s, n_r = steps_u.size, ranks_u.size
    lin = si.astype(np.int64)  # each row's cell, computed in place (no row-length temporaries)
    lin *= n_r
    lin += ri
    del si
    if not known.all():
        lin, sec, codes = lin[known], sec[known], codes[known]
    dense64 = _matrices(lin, sec, codes, names, (n_s, n_r))
    # units: a rank reporting ~1000x its peers is in milliseconds (its columns are rescaled)
    ms = _units(dense64[0], ri[known], sec, ranks_u, warnings)
    if ms.size:
        for mat in dense64:
            if mat is not None:
                mat[:, ms] /= 1000.0
    total_m, comp_m, comm_m = (None if x is None else x.astype(np.float32) for x in dense64)
    if total_m is None:
        parts = [m for m in (comp_m, comm_m) if m is not None]
        total_m = parts[0] if len(parts) == 1 else np.where(
            np.isnan(parts[0]) | np.isnan(parts[1]), np.nan, parts[0] + parts[1])
    basis = Basis.STEP
    compute = total_m  # every value > 0 or NaN already: no copy
    if comm_m is not None and dense64[0] is None and comp_m is None:
        raise DataError("only collective sections were given: need the step total or compute "
                        "sections too", where)
    if comm_m is not None:
        compute = total_m - comm_m if dense64[0] is not None else comp_m  # type: ignore[assignment]
        basis = Basis.COMPUTE
    elif comp_m is not None:
        compute, basis = comp_m, Basis.COMPUTE
    if compute is not total_m:
        compute = np.where(compute > 0, compute, np.nan).astype(np.float32)
    if ranks is None:
        meta = _meta(df, ri, ranks_u, leaf_of)  # every row is of a known rank here
    else:  # streaming: the analysis keeps the rank metadata from calibration
        meta = ((None,) * n_r, np.full(n_r, -1, dtype=np.int64), None, (None,) * n_r)
    return TimingMatrix(steps_u, ranks_u, total_m, compute, comm_m, *meta, basis,
                        tuple(warnings))


def _meta(df: pl.DataFrame, ri: np.ndarray, ranks: np.ndarray, leaf_of: Mapping[str, str] | None,
          ) -> tuple[tuple[str | None, ...], np.ndarray, np.ndarray | None, tuple[str | None, ...]]:
    """Each rank's node, GPU, peer group (stage/role) and leaf: its first non-empty value.
    ``ri`` is each row's index into ``ranks``."""
    import polars as pl

    cols = [c for c in ("node", "gpu", "stage", "leaf") if c in df.columns]
    n = ranks.size
    node: list[str | None] = [None] * n
    gpu = np.full(n, -1, dtype=np.int64)
    stage: np.ndarray | None = None
    leaf: list[str | None] = [None] * n
    if cols:
        # each rank's first row (every rank has rows: the axis came from them)
        first = np.full(n, ri.size, dtype=np.int64)
        np.minimum.at(first, ri, np.arange(ri.size))
        per = df[pl.Series(first)]  # row gather (Series.gather runs a query per column)
        if any(per[c].null_count() for c in cols):  # a rank's first row lacks a value: look further
            per = (df.select(cols).with_columns(pl.Series("_r", ri)).lazy().group_by("_r")
                   .agg([pl.col(c).drop_nulls().first() for c in cols]).sort("_r").collect())
        if "node" in cols:
            node = per["node"].to_list()
        if "gpu" in cols:
            g = per["gpu"]
            gpu = (g.fill_null(-1) if g.null_count() else g).to_numpy().astype(np.int64)
        if "stage" in cols and per["stage"].null_count() == 0 and per.height == n:
            stage = stage_codes(per["stage"].to_numpy())
        if "leaf" in cols:
            leaf = per["leaf"].to_list()
    return tuple(node), gpu, stage, leaves(node, leaf, leaf_of)


def stage_codes(values: np.ndarray) -> np.ndarray:
    """Each rank's peer group from its stage value (numbers in order, text in text order)."""
    _, codes = np.unique(values.astype(str) if values.dtype == object else values,
                         return_inverse=True)
    return codes.astype(np.int64)


def leaves(node: Sequence[str | None], leaf: Sequence[str | None],
           leaf_of: Mapping[str, str] | None) -> tuple[str | None, ...]:
    """Each rank's leaf: its own column's, else its node's in ``leaf_of`` (a fleet.csv)."""
    if not leaf_of:
        return tuple(leaf)
    return tuple(lf or (leaf_of.get(nd) if nd else None) for nd, lf in zip(node, leaf, strict=True))


def prepare_steps(df: pl.DataFrame, where: str, ranks: np.ndarray) -> TimingMatrix | None:
    """Streaming fast path for plain ``step,rank,seconds`` rows on a known rank axis (no
    sections): a direct scatter into the matrix, with the same skips and warnings as
    ``prepare`` for bad values, unknown ranks and duplicates. None when ``prepare`` is needed
    (sections, or columns to normalise)."""
    import polars as pl

    cols = set(df.columns)
    if not {"step", "rank", "seconds"} <= cols or ("section" in cols and df["section"].drop_nulls()
                                                  .cast(pl.String).str.strip_chars().ne("").any()):
        return None
    warnings: list[str] = []
    step = df["step"].cast(pl.Int64, strict=False).fill_null(-1).to_numpy()
    rank = df["rank"].cast(pl.Int64, strict=False).fill_null(-1).to_numpy()
    sec = df["seconds"].cast(pl.Float64, strict=False).fill_null(np.nan).to_numpy()
    good = ((step >= 0) & (rank >= 0) & np.isfinite(sec) & (sec >= TINY_SECONDS)
            & (sec <= HUGE_SECONDS))
    if not good.all():
        warnings.append(f"{int((~good).sum())} of {good.size} rows with a missing, non-numeric, "
                        f"zero, negative or implausible step/rank/duration skipped")
        step, rank, sec = step[good], rank[good], sec[good]
    if rank.size == ranks.size and np.array_equal(rank, ranks):  # one full step, in rank order
        ri, known = np.arange(ranks.size), np.ones(rank.size, dtype=bool)
    else:
        ri = np.clip(np.searchsorted(ranks, rank), 0, ranks.size - 1)
        known = ranks[ri] == rank
    if not known.all():
        warnings.append(f"rows of {np.unique(rank[~known]).size} rank(s) unseen during "
                        "calibration skipped")
        step, ri, sec = step[known], ri[known], sec[known]
    n_r = ranks.size
    if step.size == 0:  # nothing usable in these rows: an empty block carrying the warnings
        return steps_only(np.zeros(0, dtype=np.int64), ranks,
                          np.zeros((0, n_r), dtype=np.float32), warnings)
    if step.min() == step.max():
        steps_u, si = step[:1], np.zeros(step.size, dtype=np.int64)
    else:
        steps_u, si = np.unique(step, return_inverse=True)
    lin = si * n_r + ri
    flat = np.full(steps_u.size * n_r, np.nan, dtype=np.float32)
    flat[lin] = sec
    dup = lin.size - int(np.count_nonzero(np.isfinite(flat)))
    if dup:
        warnings.append(f"{dup} duplicate (step, rank, section) rows: kept the last")
    return steps_only(steps_u, ranks, flat.reshape(steps_u.size, n_r), warnings)


def steps_only(steps: np.ndarray, ranks: np.ndarray, total: np.ndarray,
               warnings: list[str]) -> TimingMatrix:
    """Step totals without sections or rank metadata: ``compute`` is ``total`` itself (each
    value > 0 or NaN already), no node, GPU, stage or leaf."""
    n = (None,) * ranks.size
    return TimingMatrix(steps, ranks, total, total, None, n,
                        np.full(ranks.size, -1, dtype=np.int64), None, n, Basis.STEP,
                        tuple(warnings))

"""From the long timing table (DESIGN.md contract) to dense (steps, ranks) matrices.

Input columns: ``step,rank,seconds`` (or ``ms`` in milliseconds), optional ``node,gpu,stage,
role,leaf,section`` (``role``: expert group, data-parallel replica kind... ranks are compared
with those of the same stage and role); others are ignored. Rows whose ``section`` is empty/``step``/``total`` are step
totals; other sections are split into collective sections (all-reduce, all-gather,
reduce-scatter, barrier, p2p, wait, ...: ``is_comm``) and compute sections.

Every repair is reported in ``warnings`` (never silent): rows with missing, non-numeric, zero,
negative or implausibly large durations are skipped; duplicate (step, rank, section) rows keep
the last; a rank whose median is ~1000x its peers' is taken as milliseconds and converted;
rank ids that never report are named.
"""

from __future__ import annotations

import contextlib
import warnings as _warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from minutiae.analyses.stragglers.types import Basis
from minutiae.errors import DataError

COMM_WORDS = ("allreduce", "all-reduce", "all_reduce", "reduce-scatter", "reduce_scatter",
              "reducescatter", "allgather", "all-gather", "all_gather", "alltoall", "all-to-all",
              "comm", "nccl", "barrier", "wait", "p2p", "send", "recv", "collective", "sync")
TOTAL_NAMES = frozenset({"", "step", "total", "iteration", "train_step"})
HUGE_SECONDS = 1e6
TINY_SECONDS = 1e-9  # below a nanosecond no step was measured (and float32 flushes it to 0)
MS_RATIO = (200.0, 5000.0)


def is_comm(section: str) -> bool:
    s = section.lower()
    return any(w in s for w in COMM_WORDS)


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


def _few(values: np.ndarray, n: int = 5) -> str:
    head = ", ".join(str(int(v)) for v in values[:n])
    return head + (f" ... ({values.size} in all)" if values.size > n else "")


def _typed(df: pl.DataFrame) -> pl.DataFrame | None:
    """The common case without any repair: canonical names, integer step/rank, float seconds,
    no section (or an all-null one: step totals only) or role column, no bad value. Checked with eager Series and numpy (each polars
    query costs ~0.5 ms, more than the whole check for a job of 10,000 rows). None: not that
    case (``_normalise`` does the general work and reports every repair)."""
    cols = df.columns
    if "section" in cols and df["section"].null_count() == df.height:  # step totals only
        cols = [c for c in cols if c != "section"]
    sch = df.schema
    if (any(c != c.strip().lower() for c in cols) or "section" in cols or "role" in cols
            or not {"step", "rank", "seconds"} <= set(cols)
            or not (sch["step"].is_integer() and sch["rank"].is_integer() and sch["seconds"].is_float())
            or ("gpu" in cols and not sch["gpu"].is_integer())
            or ("stage" in cols and not sch["stage"].is_integer())
            or any(c in cols and sch[c] != pl.String for c in ("node", "leaf"))
            or df.height == 0 or df["step"].null_count() or df["rank"].null_count()):
        return None
    step, rank, sec = df["step"].to_numpy(), df["rank"].to_numpy(), df["seconds"].to_numpy()
    with np.errstate(invalid="ignore"):
        ok = (step.min() >= 0 and rank.min() >= 0 and bool(np.isfinite(sec).all())
              and sec.min() >= TINY_SECONDS and sec.max() <= HUGE_SECONDS)
    if not ok:
        return None
    keep = [df["step"].cast(pl.Int64), df["rank"].cast(pl.Int64), df["seconds"].cast(pl.Float64)]
    keep += [df[c].cast(pl.Int64) if c in ("gpu", "stage") else df[c]
             for c in ("node", "leaf", "gpu", "stage") if c in cols]
    return pl.DataFrame(keep)


def _normalise(df: pl.DataFrame, where: str, warnings: list[str],
               ) -> tuple[pl.DataFrame, np.ndarray, list[str]]:
    """The canonical table, each row's section code and the section names."""
    fast = _typed(df)
    if fast is not None:
        if _has_duplicates(fast, np.zeros(fast.height, dtype=np.int64)):
            before = fast.height
            fast = fast.unique(subset=["step", "rank"], keep="last", maintain_order=True)
            warnings.append(f"{before - fast.height} duplicate (step, rank, section) rows: kept the last")
        return fast, np.zeros(fast.height, dtype=np.int64), [""]
    if any(c != c.strip().lower() for c in df.columns):
        df = df.rename({c: c.strip().lower() for c in df.columns})
    if "seconds" not in df.columns:
        for name, scale in (("ms", 1e-3), ("milliseconds", 1e-3)):
            if name in df.columns:
                df = df.with_columns((pl.col(name).cast(pl.Float64, strict=False) * scale)
                                     .alias("seconds"))
                break
    missing = [c for c in ("step", "rank", "seconds") if c not in df.columns]
    if missing:
        raise DataError(f"missing column(s) {', '.join(missing)}; need at least step,rank,seconds "
                        f"(found: {', '.join(df.columns) or 'none'})", where)
    cols = [pl.col("step").cast(pl.Int64, strict=False), pl.col("rank").cast(pl.Int64, strict=False),
            pl.col("seconds").cast(pl.Float64, strict=False)]
    if "section" in df.columns:
        cols.append(pl.col("section").cast(pl.String).fill_null("").str.strip_chars())
    else:
        cols.append(pl.lit("").alias("section"))
    for c in ("node", "leaf"):
        if c in df.columns:
            cols.append(pl.col(c).cast(pl.String))
    if "gpu" in df.columns:
        cols.append(pl.col("gpu").cast(pl.Int64, strict=False))
    peer = [c for c in ("stage", "role") if c in df.columns]
    if peer == ["stage"] and df.schema["stage"].is_integer():
        cols.append(pl.col("stage"))
    elif peer:  # peers do the same work: same pipeline stage and, when given, the same role
        cols.append(pl.concat_str([pl.col(c).cast(pl.String) for c in peer], separator="|")
                    .alias("stage"))
    df = df.select(cols)
    n0 = df.height
    # every kind of bad row counted in numpy (nulls read as NaN), no query; most files have none
    step = df["step"].cast(pl.Float64).to_numpy()
    rank = df["rank"].cast(pl.Float64).to_numpy()
    sec = df["seconds"].to_numpy()
    with np.errstate(invalid="ignore"):
        bad_id = ~((step >= 0) & (rank >= 0))  # NaN (null) compares False
        bad = ~bad_id & ~(np.isfinite(sec) & (sec > 0))
        implausible = ~bad_id & ~bad & ((sec > HUGE_SECONDS) | (sec < TINY_SECONDS))
    n_id, nb, nh = int(bad_id.sum()), int(bad.sum()), int(implausible.sum())
    if n_id:
        warnings.append(f"{n_id} of {n0} rows without a valid non-negative step/rank skipped")
    if nb:
        first = df.row(int(np.flatnonzero(bad)[0]), named=True)
        warnings.append(f"{nb} of {n0} rows with missing, non-numeric, zero or negative durations "
                        f"skipped (first: step {first['step']} rank {first['rank']})")
    if nh:
        warnings.append(f"{nh} rows with implausible durations (> {HUGE_SECONDS:.0e} s or "
                        f"< {TINY_SECONDS:.0e} s) skipped")
    if n_id or nb or nh:
        df = df.filter(pl.Series(~(bad_id | bad | implausible)))
    if df.height == 0:
        raise DataError("no usable timing rows", where)
    codes, names = _section_codes(df)
    if _has_duplicates(df, codes):
        before = df.height
        df = df.unique(subset=["step", "rank", "section"], keep="last", maintain_order=True)
        warnings.append(f"{before - df.height} duplicate (step, rank, section) rows: kept the last")
        codes, names = _section_codes(df)
    return df, codes, names


def _has_duplicates(df: pl.DataFrame, codes: np.ndarray) -> bool:
    """Whether two rows share (step, rank, section), counted in numpy (a polars ``unique`` per
    file is most of the preparation time of a small job)."""
    step = df["step"].to_numpy()
    rank = df["rank"].to_numpy()
    if "section" not in df.columns and step.size > 1:  # rows in (step, rank) order: no sort
        d_step, d_rank = np.diff(step), np.diff(rank)
        if bool(((d_step > 0) | ((d_step == 0) & (d_rank > 0))).all()):
            return False
    s0, r0 = int(step.min()), int(rank.min())
    ns, nr, nc = int(step.max()) - s0 + 1, int(rank.max()) - r0 + 1, int(codes.max()) + 1
    if ns * nr * nc > 8 * step.size + (1 << 20):  # sparse ids: sort instead of counting
        key = np.sort((step - s0) * (nr * nc) + (rank - r0) * nc + codes)
        return bool((key[1:] == key[:-1]).any())
    key = (step - s0) * (nr * nc) + (rank - r0) * nc + codes
    return bool(np.bincount(key, minlength=1).max() > 1)


def _section_codes(df: pl.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Each row's index into the sorted distinct section names (no per-row Python); a table
    without a ``section`` column holds step totals only."""
    if "section" not in df.columns:
        return np.zeros(df.height, dtype=np.int64), [""]
    return _section_codes_of(df["section"])


def _section_codes_of(section: pl.Series) -> tuple[np.ndarray, list[str]]:
    names = sorted(section.unique().to_list())
    if len(names) == 1:
        return np.zeros(section.len(), dtype=np.int64), names
    codes = section.replace_strict(names, list(range(len(names))), return_dtype=pl.Int64)
    return codes.to_numpy(), names


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
        return np.flatnonzero(present).astype(a.dtype), index[a]
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


def _ms_ranks(medians: np.ndarray, ranks: np.ndarray, warnings: list[str]) -> np.ndarray:
    """Indices of the ranks whose median duration is ~1000x their peers' (taken as
    milliseconds), from each rank's median step total (or median row when no totals)."""
    keep = np.isfinite(medians)
    m = medians[keep]
    overall = float(np.median(m)) if m.size else 0.0
    none = np.zeros(0, dtype=np.int64)
    if overall <= 0:
        return none
    ratio = m / overall
    hit = np.flatnonzero(keep)[(ratio >= MS_RATIO[0]) & (ratio <= MS_RATIO[1])]
    if hit.size and hit.size < m.size / 2:
        warnings.append(f"rank(s) {_few(np.sort(ranks[hit]))} report ~1000x their peers' "
                        "durations: taken as milliseconds and converted to seconds")
        return hit
    if overall > 3600:
        warnings.append(f"median step time is {overall:.0f} s: if these are milliseconds, name "
                        "the column 'ms' instead of 'seconds'")
    return none


def prepare(df: pl.DataFrame, where: str, leaf_of: Mapping[str, str] | None = None,
            ranks: np.ndarray | None = None) -> TimingMatrix:
    """The dense matrices of ``df``; ``ranks`` fixes the rank axis (streaming: rows of unknown
    ranks are skipped with a warning)."""
    warnings: list[str] = []
    df, codes, names = _normalise(df, where, warnings)
    step = df["step"].to_numpy()
    rank = df["rank"].to_numpy()
    sec = df["seconds"].to_numpy().astype(np.float64)
    steps_u, si = _unique_inverse(step)
    if ranks is None:
        ranks_u, ri = _unique_inverse(rank)
        known = np.ones(rank.size, dtype=bool)
        span = int(ranks_u[-1] - ranks_u[0] + 1)
        if span > ranks_u.size:
            gaps = np.setdiff1d(np.arange(ranks_u[0], ranks_u[-1] + 1), ranks_u)
            warnings.append(f"rank(s) {_few(gaps)} never reported")
    else:
        ranks_u = ranks
        ri = np.clip(np.searchsorted(ranks_u, rank), 0, ranks_u.size - 1)
        known = ranks_u[ri] == rank
        if not known.all():
            warnings.append(f"rows of {np.unique(rank[~known]).size} rank(s) unseen during "
                            "calibration skipped")
    n_s, n_r = steps_u.size, ranks_u.size
    lin = (si * n_r + ri)[known]
    sec, codes = sec[known], codes[known]
    kinds = np.array([0 if s.lower() in TOTAL_NAMES else (2 if is_comm(s) else 1) for s in names])
    kind = kinds[codes] if codes.size else np.zeros(0, int)

    def dense(mask: np.ndarray) -> np.ndarray | None:
        if not mask.any():
            return None
        total = np.bincount(lin[mask], weights=sec[mask], minlength=n_s * n_r)
        count = np.bincount(lin[mask], minlength=n_s * n_r)
        return np.where(count > 0, total, np.nan).reshape(n_s, n_r)

    dense64 = [dense(kind == 0), dense(kind == 1), dense(kind == 2)]
    # units: a rank reporting ~1000x its peers is in milliseconds (its columns are rescaled)
    if dense64[0] is not None:
        tot = dense64[0]
        with np.errstate(all="ignore"), _quiet():
            medians = np.nanmedian(tot, axis=0) if np.isnan(tot).any() else np.median(tot, axis=0)
    else:
        medians = _rank_medians(ri[known], sec, n_r)
    ms = _ms_ranks(medians, ranks_u, warnings)
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
    compute = total_m
    if comm_m is not None and not (kind == 0).any() and comp_m is None:
        raise DataError("only collective sections were given: need the step total or compute "
                        "sections too", where)
    if comm_m is not None:
        compute = total_m - comm_m if (kind == 0).any() else comp_m  # type: ignore[assignment]
        basis = Basis.COMPUTE
    elif comp_m is not None:
        compute, basis = comp_m, Basis.COMPUTE
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
            values = per["stage"].to_numpy()
            _, codes = np.unique(values.astype(str) if values.dtype == object else values,
                                 return_inverse=True)
            stage = codes.astype(np.int64)
        if "leaf" in cols:
            leaf = per["leaf"].to_list()
    if leaf_of:
        leaf = [leaf[i] or (leaf_of.get(node[i] or "") if node[i] else None) for i in range(n)]
    return tuple(node), gpu, stage, tuple(leaf)


def prepare_steps(df: pl.DataFrame, where: str, ranks: np.ndarray) -> TimingMatrix | None:
    """Streaming fast path for plain ``step,rank,seconds`` rows on a known rank axis (no
    sections): a direct scatter into the matrix, with the same skips and warnings as
    ``prepare`` for bad values, unknown ranks and duplicates. None when ``prepare`` is needed
    (sections, or columns to normalise)."""
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
        empty = np.zeros((0, n_r), dtype=np.float32)
        n = (None,) * n_r
        return TimingMatrix(np.zeros(0, dtype=np.int64), ranks, empty, empty, None, n,
                            np.full(n_r, -1, dtype=np.int64), None, n, Basis.STEP,
                            tuple(warnings))
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
    total = flat.reshape(steps_u.size, n_r)
    n = (None,) * n_r
    return TimingMatrix(steps_u, ranks, total, total, None, n, np.full(n_r, -1, dtype=np.int64),
                        None, n, Basis.STEP, tuple(warnings))

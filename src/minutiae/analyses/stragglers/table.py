"""The long timing table in canonical form (pure): canonical column names, typed columns,
bad rows skipped and duplicates resolved, each repair reported in ``warnings``; each row's
section code. ``prep`` turns the result into dense matrices."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from minutiae.errors import DataError

if TYPE_CHECKING:
    import polars as pl

COMM_WORDS = ("allreduce", "all-reduce", "all_reduce", "reduce-scatter", "reduce_scatter",
              "reducescatter", "allgather", "all-gather", "all_gather", "alltoall", "all-to-all",
              "comm", "nccl", "barrier", "wait", "p2p", "send", "recv", "collective", "sync")
TOTAL_NAMES = frozenset({"", "step", "total", "iteration", "train_step"})
HUGE_SECONDS = 1e6
TINY_SECONDS = 1e-9  # below a nanosecond no step was measured (and float32 flushes it to 0)
#: rows compared at a time by the order checks
CHUNK = 1 << 20


def is_comm(section: str) -> bool:
    s = section.lower()
    return any(w in s for w in COMM_WORDS)


def _typed(df: pl.DataFrame) -> pl.DataFrame | None:
    """The common case without any repair: canonical names, integer step/rank, float seconds,
    no section (or an all-null one: step totals only) or role column, no bad value. Checked with eager Series and numpy (each polars
    query costs ~0.5 ms, more than the whole check for a job of 10,000 rows). None: not that
    case (``normalise`` does the general work and reports every repair)."""
    import polars as pl

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
    # the columns as read (an int32 step is used as it is: casting 20 M rows cost 0.5 s and
    # 480 MB); only 64-bit unsigned ids are cast, to keep their overflow check
    keep = [df[c].cast(pl.Int64) if df[c].dtype == pl.UInt64 else df[c]
            for c in ("step", "rank", "seconds", "node", "leaf", "gpu", "stage") if c in cols]
    return pl.DataFrame(keep)


def normalise(df: pl.DataFrame, where: str, warnings: list[str],
               ) -> tuple[pl.DataFrame, np.ndarray, list[str]]:
    """The canonical table, each row's section code and the section names."""
    import polars as pl

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
    df = _skip_bad(df.select(_columns(df)), where, warnings)
    codes, names = _section_codes(df)
    if _has_duplicates(df, codes):
        before = df.height
        df = df.unique(subset=["step", "rank", "section"], keep="last", maintain_order=True)
        warnings.append(f"{before - df.height} duplicate (step, rank, section) rows: kept the last")
        codes, names = _section_codes(df)
    return df, codes, names


def _columns(df: pl.DataFrame) -> list[pl.Expr]:
    """The canonical columns of a table that has step, rank and seconds (typed, bad cells as
    null; ``stage`` joins stage and role when both are given)."""
    import polars as pl

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
    return cols


def _skip_bad(df: pl.DataFrame, where: str, warnings: list[str]) -> pl.DataFrame:
    """The rows with a valid step, rank and plausible duration; each kind of skip reported."""
    import polars as pl

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
    return df


def _has_duplicates(df: pl.DataFrame, codes: np.ndarray) -> bool:
    """Whether two rows share (step, rank, section), counted in numpy (a polars ``unique`` per
    file is most of the preparation time of a small job)."""
    step = df["step"].to_numpy()
    rank = df["rank"].to_numpy()
    if "section" not in df.columns and rising(step, rank):  # rows in (step, rank) order
        return False
    step, rank = step.astype(np.int64, copy=False), rank.astype(np.int64, copy=False)
    s0, r0 = int(step.min()), int(rank.min())
    ns, nr, nc = int(step.max()) - s0 + 1, int(rank.max()) - r0 + 1, int(codes.max()) + 1
    if ns * nr * nc > 8 * step.size + (1 << 20):  # sparse ids: sort instead of counting
        key = np.sort((step - s0) * (nr * nc) + (rank - r0) * nc + codes)
        return bool((key[1:] == key[:-1]).any())
    key = (step - s0) * (nr * nc) + (rank - r0) * nc + codes
    return bool(np.bincount(key, minlength=1).max() > 1)


def rising(first: np.ndarray, then: np.ndarray | None = None, strict: bool = True) -> bool:
    """Whether the rows go up in ``first`` (then in ``then`` where ``first`` is equal), checked
    a chunk at a time: no full-length difference or mask (two of 160 MB each for 20 M rows)."""
    for i in range(0, first.size - 1, CHUNK):
        j = min(i + CHUNK, first.size - 1)
        a, b = first[i:j], first[i + 1:j + 1]
        up = (b > a) if strict or then is not None else (b >= a)
        if then is not None:
            up |= (b == a) & (then[i + 1:j + 1] > then[i:j])
        if not bool(up.all()):
            return False
    return True


def _section_codes(df: pl.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Each row's index into the sorted distinct section names (no per-row Python); a table
    without a ``section`` column holds step totals only."""
    if "section" not in df.columns:
        return np.zeros(df.height, dtype=np.int64), [""]
    return _section_codes_of(df["section"])


def _section_codes_of(section: pl.Series) -> tuple[np.ndarray, list[str]]:
    import polars as pl

    names = sorted(section.unique().to_list())
    if len(names) == 1:
        return np.zeros(section.len(), dtype=np.int64), names
    codes = section.replace_strict(names, list(range(len(names))), return_dtype=pl.Int64)
    return codes.to_numpy(), names

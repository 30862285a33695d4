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

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from minutiae.analyses.stragglers_types import Basis
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


def _few(values: np.ndarray, n: int = 5) -> str:
    head = ", ".join(str(int(v)) for v in values[:n])
    return head + (f" ... ({values.size} in all)" if values.size > n else "")


def _normalise(df: pl.DataFrame, where: str, warnings: list[str]) -> pl.DataFrame:
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
    if peer:  # peers do the same work: same pipeline stage and, when given, the same role
        cols.append(pl.concat_str([pl.col(c).cast(pl.String) for c in peer], separator="|")
                    .alias("stage"))
    df = df.select(cols)
    n0 = df.height
    bad_id = pl.col("step").is_null() | pl.col("rank").is_null() | (pl.col("step") < 0) | (pl.col("rank") < 0)
    n_id = int(df.select(bad_id.sum()).item())
    if n_id:
        warnings.append(f"{n_id} of {n0} rows without a valid non-negative step/rank skipped")
        df = df.filter(~bad_id)
    sec = pl.col("seconds")
    bad = sec.is_null() | sec.is_nan() | sec.is_infinite() | (sec <= 0)
    nb = int(df.select(bad.sum()).item())
    if nb:
        first = df.filter(bad).row(0, named=True)
        warnings.append(f"{nb} of {n0} rows with missing, non-numeric, zero or negative durations "
                        f"skipped (first: step {first['step']} rank {first['rank']})")
        df = df.filter(~bad)
    implausible = (sec > HUGE_SECONDS) | (sec < TINY_SECONDS)
    nh = int(df.select(implausible.sum()).item())
    if nh:
        warnings.append(f"{nh} rows with implausible durations (> {HUGE_SECONDS:.0e} s or "
                        f"< {TINY_SECONDS:.0e} s) skipped")
        df = df.filter(~implausible)
    if df.height == 0:
        raise DataError("no usable timing rows", where)
    before = df.height
    df = df.unique(subset=["step", "rank", "section"], keep="last", maintain_order=True)
    if df.height < before:
        warnings.append(f"{before - df.height} duplicate (step, rank, section) rows: kept the last")
    return df


def _fix_units(df: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    totals = df.filter(pl.col("section").is_in(list(TOTAL_NAMES)))
    base = totals if totals.height else df
    per = base.group_by("rank").agg(pl.col("seconds").median().alias("m"))
    overall = float(np.median(per["m"].to_numpy())) if per.height else 0.0
    if overall <= 0:
        return df
    ms = per.filter((pl.col("m") / overall >= MS_RATIO[0]) & (pl.col("m") / overall <= MS_RATIO[1]))
    if ms.height and ms.height < per.height / 2:
        ranks = np.sort(ms["rank"].to_numpy())
        warnings.append(f"rank(s) {_few(ranks)} report ~1000x their peers' durations: taken as "
                        "milliseconds and converted to seconds")
        df = df.with_columns(pl.when(pl.col("rank").is_in(ranks.tolist()))
                             .then(pl.col("seconds") / 1000.0).otherwise(pl.col("seconds"))
                             .alias("seconds"))
    elif overall > 3600:
        warnings.append(f"median step time is {overall:.0f} s: if these are milliseconds, name "
                        "the column 'ms' instead of 'seconds'")
    return df


def prepare(df: pl.DataFrame, where: str, leaf_of: Mapping[str, str] | None = None,
            ranks: np.ndarray | None = None) -> TimingMatrix:
    """The dense matrices of ``df``; ``ranks`` fixes the rank axis (streaming: rows of unknown
    ranks are skipped with a warning)."""
    warnings: list[str] = []
    df = _normalise(df, where, warnings)
    df = _fix_units(df, warnings)
    step = df["step"].to_numpy()
    rank = df["rank"].to_numpy()
    sec = df["seconds"].to_numpy().astype(np.float64)
    section = df["section"].to_numpy()
    steps_u, si = np.unique(step, return_inverse=True)
    if ranks is None:
        ranks_u, ri = np.unique(rank, return_inverse=True)
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
    sec, section = sec[known], section[known]
    kinds = np.array([0 if s.lower() in TOTAL_NAMES else (2 if is_comm(s) else 1)
                      for s in np.unique(section)])
    kind = kinds[np.searchsorted(np.unique(section), section)] if section.size else np.zeros(0, int)

    def dense(mask: np.ndarray) -> np.ndarray | None:
        if not mask.any():
            return None
        total = np.bincount(lin[mask], weights=sec[mask], minlength=n_s * n_r)
        count = np.bincount(lin[mask], minlength=n_s * n_r)
        out = np.where(count > 0, total, np.nan).astype(np.float32)
        return out.reshape(n_s, n_r)

    total_m, comp_m, comm_m = dense(kind == 0), dense(kind == 1), dense(kind == 2)
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
        meta = _meta(df.filter(pl.Series(known)), ranks_u, leaf_of)
    else:  # streaming: the analysis keeps the rank metadata from calibration
        meta = ((None,) * n_r, np.full(n_r, -1, dtype=np.int64), None, (None,) * n_r)
    return TimingMatrix(steps_u, ranks_u, total_m, compute, comm_m, *meta, basis,
                        tuple(warnings))


def _meta(df: pl.DataFrame, ranks: np.ndarray, leaf_of: Mapping[str, str] | None,
          ) -> tuple[tuple[str | None, ...], np.ndarray, np.ndarray | None, tuple[str | None, ...]]:
    cols = [c for c in ("node", "gpu", "stage", "leaf") if c in df.columns]
    n = ranks.size
    node: list[str | None] = [None] * n
    gpu = np.full(n, -1, dtype=np.int64)
    stage: np.ndarray | None = None
    leaf: list[str | None] = [None] * n
    if cols:
        per = (df.group_by("rank").agg([pl.col(c).drop_nulls().first() for c in cols])
               .sort("rank"))
        pos = np.searchsorted(ranks, per["rank"].to_numpy())
        if "node" in cols:
            for p, v in zip(pos.tolist(), per["node"].to_list(), strict=True):
                node[p] = v
        if "gpu" in cols:
            gpu[pos] = per["gpu"].fill_null(-1).to_numpy()
        if "stage" in cols and per["stage"].null_count() == 0 and per.height == n:
            _, codes = np.unique(per["stage"].to_numpy().astype(str), return_inverse=True)
            stage = np.empty(n, dtype=np.int64)
            stage[pos] = codes
        if "leaf" in cols:
            for p, v in zip(pos.tolist(), per["leaf"].to_list(), strict=True):
                leaf[p] = v
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

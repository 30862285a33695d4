"""Run segments: one file, several runs of the job (restarts, resumptions onto new nodes).

A job resumed from a checkpoint writes on into the same log: its step numbers start again (at 0
or at the checkpoint's step) and its ranks may sit on other nodes. Read as one run, the second
run's rows look like duplicates of the first (kept the last: a run silently dropped) and each
rank's node is the one it had first (a slow node after the restart blamed on the node the
ranks left). Here a rank's rows, in file order, start a new segment where its step number goes
back or its node changes; segment ``k`` is every rank's ``k``-th such stretch, or, where steps
only rise, every rank's rows from the restart's first step on (the ranks that kept their node
restarted too). Each segment is
analysed alone (ranks mapped to nodes from its own rows) and the reports are merged: every
suspect says its segment, nothing is dropped as a duplicate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from minutiae.analyses.stragglers.analysis import Options, analyse
from minutiae.analyses.stragglers.prep import prepare
from minutiae.analyses.stragglers.table import rising
from minutiae.analyses.stragglers.types import StragglerReport


@dataclass(frozen=True, slots=True)
class Segment:
    """Rows of one run: ``why`` it began (``start``, ``step reset``, ``rank moved node``)."""

    index: int
    why: str
    rows: int
    first_step: int
    last_step: int
    analysed: bool
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "why": self.why, "rows": self.rows,
                "first_step": self.first_step, "last_step": self.last_step,
                "analysed": self.analysed, "note": self.note}


def segment_ids(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """Each row's segment and, per row, the reason code that opened it (0 none, 1 step reset,
    2 node change), following each rank (and section) in file order; None when the file is one
    run (the common case, checked without a sort when rows are in step order). Where steps
    never go back, a segment is every rank's rows from a restart's first step on
    (``_restarts``); where they do, segment ``k`` is every rank's ``k``-th run."""
    if df.height < 2 or not {"step", "rank"} <= set(df.columns):
        return None
    step, rank = _ids(df["step"]), _ids(df["rank"])
    in_order = rising(step, strict=False)
    if in_order and _same_node_throughout(df, rank):
        return None  # steps never go back (rows in step order) and no rank changes node
    node: np.ndarray | None = None
    if "node" in df.columns:
        node = (df["node"].cast(pl.String).fill_null("").cast(pl.Categorical).to_physical()
                .to_numpy())
    if node is None and in_order:
        return None
    step, rank = step.astype(np.int64, copy=False), rank.astype(np.int64, copy=False)
    if "section" in df.columns:  # each (rank, section) is its own sequence of steps
        sec = (df["section"].cast(pl.String).fill_null("").cast(pl.Categorical).to_physical()
               .to_numpy().astype(np.int64))
        rank = rank * (int(sec.max()) + 1) + sec
    order = np.argsort(rank, kind="stable")  # file order kept within each rank
    r_s, s_s = rank[order], step[order]
    same = r_s[1:] == r_s[:-1]
    why = np.zeros(step.size, dtype=np.int8)
    why[1:][same & (s_s[1:] < s_s[:-1])] = 1
    if node is not None:
        n_s = node[order]
        why[1:][same & (n_s[1:] != n_s[:-1]) & (why[1:] == 0)] = 2
    if not why.any():
        return None
    opened = np.empty_like(why)
    opened[order] = why
    if not (why == 1).any():  # only moves, steps rising: a restart is every rank's
        return np.searchsorted(_restarts(s_s, why), step, side="right"), opened
    c = np.cumsum(why > 0)
    first = np.ones(step.size, dtype=bool)
    first[1:] = ~same
    start = np.maximum.accumulate(np.where(first, np.arange(step.size), 0))
    seg_s: np.ndarray = c - c[start]
    seg: np.ndarray = np.empty_like(seg_s)
    seg[order] = seg_s
    return seg, opened


def _restarts(s_s: np.ndarray, why: np.ndarray) -> np.ndarray:
    """The step numbers where a run resumed on other nodes, from the rows (sorted by rank, each
    rank's in file order: steps ``s_s``) where a rank's node changed (``why``). A restart is
    the whole job's: the ranks that stayed on their node restarted too, and from the first
    step of the new run the job's peers, its warm-up and its per-node noise are the new
    allocation's (the simulator's week: two MoE jobs whose requeue swapped two of their four
    nodes kept the two that stayed in the first segment, compared alone across two pipeline
    stages, and each was reported "+3.3-3.6 % slower" after the restart). A move at step ``b``
    belongs to the restart begun at ``c <= b`` when the moving rank logged nothing in
    ``[c, b)`` (it resumed a little later), else it starts another."""
    at = np.flatnonzero(why > 0)
    first, prev = s_s[at], s_s[at - 1]  # why > 0 only on a rank's second row or later
    steps = np.unique(first)
    last_before = np.full(steps.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last_before, np.searchsorted(steps, first), prev)
    out: list[int] = []
    for b, p in zip(steps.tolist(), last_before.tolist(), strict=True):
        if not out or p >= out[-1]:
            out.append(b)
    return np.asarray(out, dtype=np.int64)


def _ids(col: pl.Series) -> np.ndarray:
    """Integer ids as numpy, -1 where missing or not a number; a column of integers without
    a null as it is (no 64-bit copy of 20 M rows)."""
    if col.dtype.is_integer() and col.dtype != pl.UInt64 and not col.null_count():
        return col.to_numpy()
    return col.cast(pl.Int64, strict=False).fill_null(-1).to_numpy()


def _same_node_throughout(df: pl.DataFrame, rank: np.ndarray) -> bool:
    """Whether every rank's rows name one node, from row hashes (no sort, no categorical):
    each row's hash against its rank's first row's."""
    if "node" not in df.columns:
        return True
    if int(rank.min()) < 0 or int(rank.max()) > 16 * rank.size + (1 << 20):
        return False
    h = df["node"].hash(seed=0).to_numpy()
    first = np.zeros(int(rank.max()) + 1, dtype=h.dtype)
    first[rank[::-1]] = h[::-1]  # the last write wins: each rank's first row
    return bool((h == first[rank]).all())


def analyse_runs(df: pl.DataFrame, where: str, leaf_of: Mapping[str, str] | None = None,
                 options: Options | None = None) -> StragglerReport:
    """``analyse(prepare(df))`` per run segment, merged (one segment: exactly that)."""
    options = options or Options()
    ids = segment_ids(df)
    if ids is None:
        return analyse(prepare(df, where, leaf_of), options, where)
    seg, why = ids
    names = {0: "start", 1: "step reset", 2: "rank moved node"}
    reports: list[tuple[int, StragglerReport]] = []
    segments: list[Segment] = []
    frame = df.with_columns(pl.Series("_seg", seg), pl.Series("_why", why))
    for k, part in enumerate(frame.partition_by("_seg", maintain_order=True, as_dict=False)):
        codes = part["_why"].to_numpy()
        reason = names[int(np.bincount(codes, minlength=3)[1:].argmax()) + 1] if k else "start"
        part = part.drop("_seg", "_why")
        steps = part["step"].cast(pl.Int64, strict=False).drop_nulls()
        lo, hi = (int(steps.to_numpy().min()), int(steps.to_numpy().max())) if steps.len() else (0, 0)
        label = f"{where} segment {k} (steps {lo}-{hi})"
        if steps.n_unique() < options.warmup + 3:
            segments.append(Segment(k, reason, part.height, lo, hi, False,
                                    f"{steps.n_unique()} steps: too few to analyse"))
            continue
        reports.append((k, analyse(prepare(part, label, leaf_of), options, label)))
        segments.append(Segment(k, reason, part.height, lo, hi, True))
    return merge(reports, segments, where)


def merge(reports: list[tuple[int, StragglerReport]], segments: list[Segment],
          where: str) -> StragglerReport:
    """One report: every segment's suspects (each naming its segment), the last analysed
    segment's calibration, every warning; ``segments`` lists them all."""
    if not reports:
        from minutiae.errors import DataError

        raise DataError(f"{len(segments)} run segments, none with enough steps to analyse",
                        where)
    last = reports[-1][1]
    suspects = tuple(dataclasses.replace(s, segment=k) for k, r in reports for s in r.suspects)
    warnings = [f"{len(segments)} run segments (restarts: "
                + ", ".join(f"{s.index}: {s.why} at step {s.first_step}" for s in segments[1:])
                + "): each analysed on its own rows and nodes"]
    for k, r in reports:
        warnings += [f"segment {k}: {w}" for w in r.warnings]
    warnings += [f"segment {s.index}: {s.note}" for s in segments if s.note]
    return dataclasses.replace(
        last, suspects=suspects, warnings=tuple(warnings),
        stopped=tuple(st for _, r in reports[-1:] for st in r.stopped),
        steps=sum(r.steps for _, r in reports), first_step=reports[0][1].first_step,
        job_level=tuple(c for _, r in reports for c in r.job_level),
        segments=tuple(s.to_json() for s in segments))

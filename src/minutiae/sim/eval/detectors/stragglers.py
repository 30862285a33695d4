"""Eval detector: the straggler analysis of every job's step timings."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from minutiae.errors import MinutiaeError
from minutiae.model import Action, Finding, Severity
from minutiae.scoring.score import Detection
from minutiae.sim.dataset import read_timings
from minutiae.sim.eval.detectors.base import Context, Failure, register


def _step_times(df: Any, segment: int) -> tuple[np.ndarray, np.ndarray]:
    """(step numbers, their times) of one run segment (a restart may count steps from 0
    again: each segment maps its own)."""
    from minutiae.analyses.stragglers.runs import segment_ids

    ids = segment_ids(df)
    part = df if ids is None else df.filter(pl.Series(ids[0]) == segment)
    steps = part.select("step", "time").unique(subset="step").sort("step")
    return steps["step"].to_numpy(), steps["time"].to_numpy()


@register("stragglers", what="straggler analysis of every job's step timings",
          needs=("timings", "jobs.csv", "fleet.csv"), kinds=("straggler",), order=40,
          requires=("minutiae.analyses.stragglers.runs:analyse_runs",))
def detect(ctx: Context) -> tuple[list[Detection], list[str], int]:
    """Every job's file through the CLI's path (``runs.analyse_runs``: run segments at
    restarts, then ``prepare`` and ``analyse`` each)."""
    from minutiae.analyses.stragglers.analysis import Options
    from minutiae.analyses.stragglers.runs import analyse_runs

    leaf_of = {r["node"]: r["leaf"] for r in ctx.ds.fleet}
    opts = Options(ranks_per_node=ctx.ds.gpus)
    out: list[Detection] = []
    notes: list[str] = []
    n = 0
    for job in ctx.ds.jobs:
        path = ctx.ds.timings_path(job.job_id)
        if not path.is_file():
            notes.append(f"{path}: missing")
            continue
        df = read_timings(path)
        step = df["step"].to_numpy()
        in_order = step.size > 1 and bool((step[1:] >= step[:-1]).all())  # the simulator's layout
        logged = (int(np.count_nonzero(step[1:] != step[:-1])) + 1 if in_order
                  else int(np.unique(step).size))
        if logged < opts.warmup + 3:
            notes.append(f"{path}: {logged} logged steps, too few to analyse")
            continue
        n += 1
        try:
            rep = analyse_runs(df, str(path), leaf_of, opts)
        except MinutiaeError as exc:
            notes.append(str(exc))
            continue
        except Exception as exc:  # noqa: BLE001 - another area's analysis failing must not stop eval
            notes.append(Failure(f"{path}: straggler analysis failed: {type(exc).__name__}: {exc}"))
            continue
        if not rep.suspects:
            continue
        by_segment: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for s in rep.suspects:
            seg = s.segment if s.segment is not None else 0
            if seg not in by_segment:
                by_segment[seg] = _step_times(df, seg)
            st, tt = by_segment[seg]
            k = min(len(st) - 1, int(np.searchsorted(st, s.detected_step)))
            f = Finding("straggler", Severity.WARNING, Action.NONE,
                        f"{s.component} {s.slowdown:+.1%} slower since step {s.since_step}",
                        component=s.component, attrs={"basis": s.basis.value})
            d = ctx.detection("stragglers", s.node, float(tt[k]), f)
            if d is not None:
                out.append(d)
    return out, notes, n

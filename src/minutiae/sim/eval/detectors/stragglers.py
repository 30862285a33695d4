"""Eval detector: the straggler analysis of every job's step timings."""

from __future__ import annotations

import numpy as np

from minutiae.errors import MinutiaeError
from minutiae.model import Action, Finding, Severity
from minutiae.scoring.score import Detection
from minutiae.sim.dataset import read_timings
from minutiae.sim.eval.detectors.base import Context, Failure, register


@register("stragglers", what="straggler analysis of every job's step timings",
          needs=("timings", "jobs.csv", "fleet.csv"), kinds=("straggler",), order=40,
          requires=("minutiae.analyses.stragglers.analysis:analyse", "minutiae.analyses.stragglers.prep:prepare"))
def detect(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.analyses.stragglers.analysis import Options, analyse
    from minutiae.analyses.stragglers.prep import prepare

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
            rep = analyse(prepare(df, str(path), leaf_of), opts, str(path))
        except MinutiaeError as exc:
            notes.append(str(exc))
            continue
        except Exception as exc:  # noqa: BLE001 - another area's analysis failing must not stop eval
            notes.append(Failure(f"{path}: straggler analysis failed: {type(exc).__name__}: {exc}"))
            continue
        if not rep.suspects:
            continue
        steps = df.select("step", "time").unique(subset="step").sort("step")
        st, tt = steps["step"].to_numpy(), steps["time"].to_numpy()
        for s in rep.suspects:
            k = min(len(st) - 1, int(np.searchsorted(st, s.detected_step)))
            f = Finding("straggler", Severity.WARNING, Action.NONE,
                        f"{s.component} {s.slowdown:+.1%} slower since step {s.since_step}",
                        component=s.component, attrs={"basis": s.basis.value})
            d = ctx.detection("stragglers", s.node, float(tt[k]), f)
            if d is not None:
                out.append(d)
    return out, notes, n

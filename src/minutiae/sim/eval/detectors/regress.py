"""Eval detector: change points in runs.csv (performance regressions), as `minutiae regress`."""

from __future__ import annotations

from minutiae.model import Severity
from minutiae.scoring.score import Detection
from minutiae.sim.eval.detectors.base import Context, register


@register("regress", what="change points in runs.csv (performance regressions)",
          needs=("runs.csv", "jobs.csv"), kinds=("regression",), order=60,
          requires=("minutiae.analyses.regress.detect:find_change_points",))
def detect(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.analyses.regress.detect import find_change_points
    from minutiae.analyses.regress.nodes import node_penalties
    from minutiae.history.read import load_history

    # the one reader of runs.csv: joins jobs.csv beside it and cleans, as `minutiae regress` does
    hist = load_history(runs=ctx.ds.root / "runs.csv")
    notes = [str(i) for i in hist.issues]
    out = []
    # as `minutiae regress`: what the time of day and slow nodes explain is taken out first
    for cp in find_change_points(hist.runs, offsets=node_penalties(hist.runs).penalty):
        if cp.change <= 0:
            continue
        out.append(Detection("regress", None, float(cp.time), "regression", Severity.WARNING, False, None,
                             f"{cp.signature}: {cp.change:+.1%} from run {cp.run_id}",
                             subject=cp.signature))
    return out, notes, len(hist.runs)

"""Eval detector: slow nodes from passive telemetry peer comparison."""

from __future__ import annotations

from minutiae.model import Action, Finding, Severity
from minutiae.scoring.score import Detection
from minutiae.sim.eval.detectors.base import Context, register


@register("slownodes", what="slow nodes from passive telemetry peer comparison",
          needs=("telemetry.parquet", "jobs.csv", "fleet.csv"), kinds=("slow_node",), order=50,
          requires=("minutiae.analyses.slownodes.analysis:detect_dataset",))
def detect(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.analyses.slownodes import analysis as slownodes

    detect = slownodes.detect_dataset
    out: list[Detection] = []
    for s in detect(ctx.ds.root):
        f = Finding("slow_node", Severity.WARNING, Action.NONE, str(getattr(s, "reason", "slow node")))
        d = ctx.detection("slownodes", s.node, float(s.time), f)
        if d is not None:
            out.append(d)
    return out, [], len(ctx.ds.nodes)

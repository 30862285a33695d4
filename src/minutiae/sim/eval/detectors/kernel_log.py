"""Eval detector: the kernel-log rules over every node's kern.log, as the agent reads it."""

from __future__ import annotations

from datetime import datetime

from minutiae.scoring.score import Detection
from minutiae.sim.dataset import read_text
from minutiae.sim.eval.detectors.base import Context, _Active, register


def _kinds() -> list[str]:
    from minutiae.node.replay import count_rules
    from minutiae.rules.logs import kernel_log_rules

    return [*(r.kind for r in kernel_log_rules()), *(r.kind for r in count_rules())]


@register("kernel_log", what="kernel-log rules over every node's kern.log", needs=("kern.log", "boots.csv"),
          kinds=_kinds, order=10,
          requires=("minutiae.node.sources.kernel_log.parse:parse_lines",
                    "minutiae.rules.log_findings:findings_from_events"))
def detect(ctx: Context) -> tuple[list[Detection], list[str], int]:
    """Every line's finding, and the agent's log-count engine rules (``log_counts.toml``:
    repeats within a window, flapping links) over them, through the backtest's replay of the
    same engine (state since boot), so the scorecard scores what the agent would say."""
    from minutiae.node.replay import TimedFinding, count_signals
    from minutiae.node.sources.kernel_log.parse import parse_lines
    from minutiae.rules.log_findings import findings_from_events

    year = datetime.fromtimestamp(ctx.ds.start, tz=None).year
    out: list[Detection] = []
    notes: list[str] = []
    logs = ctx.node_files("kern.log", notes)
    for node, path in logs:
        events = list(parse_lines(read_text(path).splitlines(), year=year))
        untimed = 0
        timed: list[TimedFinding] = []
        for f in findings_from_events(events):
            if f.time is None:
                untimed += 1
                continue
            timed.append(TimedFinding(f.time.timestamp(), f))
            d = ctx.detection("kernel_log", node, f.time.timestamp(), f)
            if d is not None:
                out.append(d)
        counted = _Active()   # a count rule's alarm is a condition: it alarms when it starts
        for t, found in count_signals(timed, ctx.ds.boots.get(node, []), node):
            for f in counted.fresh(found):
                d = ctx.detection("kernel_log", node, t, f)
                if d is not None:
                    out.append(d)
        if untimed:
            notes.append(f"{path}: {untimed} finding(s) without a time")
    return out, notes, len(logs)

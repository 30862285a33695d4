"""Eval detector: the kernel-log rules over every node's kern.log, as the agent reads it."""

from __future__ import annotations

from datetime import datetime

from minutiae.errors import InputError
from minutiae.scoring.score import Detection
from minutiae.sim.eval.detectors.base import Context, _Active, register


def _kinds() -> list[str]:
    from minutiae.node.replay import count_rules
    from minutiae.rules.logs import kernel_log_rules

    return [*(r.kind for r in kernel_log_rules()), *(r.kind for r in count_rules())]


@register("kernel_log", what="kernel-log rules over every node's kern.log", needs=("kern.log", "boots.csv"),
          kinds=_kinds, order=10,
          requires=("minutiae.node.replay:log_series", "minutiae.node.replay:count_signals"))
def detect(ctx: Context) -> tuple[list[Detection], list[str], int]:
    """Every line's finding, and the agent's log-count engine rules (``log_counts.toml``:
    repeats within a window, flapping links) over them (state since boot): the node replay's
    "what the agent would report" (``minutiae.node.replay``, as the backtest uses it), so the
    scorecard scores what the agent would say."""
    from minutiae.node.replay import count_signals, log_series

    year = datetime.fromtimestamp(ctx.ds.start, tz=None).year
    out: list[Detection] = []
    notes: list[str] = []
    logs = ctx.node_files("kern.log", notes)
    for node, path in logs:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read: {exc}", str(path)) from None
        series = log_series(data, year)
        for tf in series.findings:
            d = ctx.detection("kernel_log", node, tf.time, tf.finding)
            if d is not None:
                out.append(d)
        counted = _Active()   # a count rule's alarm is a condition: it alarms when it starts
        for t, found in count_signals(series.findings, ctx.ds.boots.get(node, []), node):
            for f in counted.fresh(found):
                d = ctx.detection("kernel_log", node, t, f)
                if d is not None:
                    out.append(d)
        if series.untimed:
            notes.append(f"{path}: {series.untimed} finding(s) without a time")
    return out, notes, len(logs)

"""Runs → CSV text in the layout ``minutiae regress --runs`` reads (pure; callers write it)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from minutiae.history.record import STACK_KEYS, RunRecord
from minutiae.history.rollouts import NodeChange


def format_runs_csv(records: Sequence[RunRecord], attrs: Sequence[str] | None = None) -> str:
    keys = list(attrs) if attrs is not None else [k for k in STACK_KEYS if any(k in r.attrs for r in records)]
    metrics = sorted({r.metric.value for r in records}) or ["seconds_per_step"]
    if len(metrics) > 1:
        raise ValueError("runs mix throughput metrics; write one file per metric")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["run_id", "time", "signature", metrics[0], *keys, "nodes", "gpus", "duration_s"])
    for r in records:
        w.writerow([r.run_id, f"{r.time:.3f}", r.signature, f"{r.value:.6f}", *(r.attr_text(k) for k in keys),
                    " ".join(r.nodes), "" if r.gpus is None else r.gpus,
                    "" if r.duration_s is None else f"{r.duration_s:.1f}"])
    return buf.getvalue()


def format_rollouts_csv(changes: Sequence[NodeChange]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["time", "node", "attr", "old", "new"])
    for c in changes:
        w.writerow([f"{c.time:.3f}", c.node, c.attr, c.old, c.new])
    return buf.getvalue()

"""The scorecard as rich tables (for ``minutiae eval`` and ``minutiae demo``)."""

from __future__ import annotations

import sys

from rich.console import Console, Group
from rich.table import Table

from minutiae.sim.eval.evaluate import Evaluation

#: damage rows in the text scorecard (all of them are in the JSON)
DAMAGE_ROWS = 20


def console() -> Console:
    """A console that does not squeeze the tables when the output is a file or a pipe."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if v is None else fmt.format(v)


def _dur(v: float | None) -> str:
    if v is None:
        return "–"
    if v < 120:
        return f"{v:.0f} s"
    if v < 7200:
        return f"{v / 60:.1f} min"
    return f"{v / 3600:.1f} h"


def scorecard(ev: Evaluation) -> Group:
    o = ev.overall
    ds = ev.dataset
    t = Table(title=f"minutiae scorecard: {len(ds.fleet)} nodes x {ds.gpus} GPUs, "
                    f"{(ds.end - ds.start) / 86400:g} days ({o.node_days:g} node-days)",
              title_justify="left")
    for col, just in (("fault class", "left"), ("faults", "right"), ("found", "right"),
                      ("recall", "right"), ("precision", "right"), ("latency p50", "right"),
                      ("p95", "right"), ("p50 steps", "right"), ("false alarms", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for c in o.classes:
        t.add_row(c.cls, str(c.faults), str(c.detected), _f(c.recall), _f(c.precision),
                  _dur(c.latency_median_s), _dur(c.latency_p95_s), _f(c.latency_median_steps, "{:.0f}"),
                  str(c.alarms_false))
    s = Table(show_header=False, title="summary", title_justify="left")
    s.add_column("what")
    s.add_column("value", justify="right")
    s.add_row("alarms (merged)", str(o.alarms))
    s.add_row("false alarms per 1,000 node-days", f"{o.false_alarms_per_1000_node_days:.1f}")
    s.add_row("false alarms by cause", ", ".join(f"{k} {v}" for k, v in o.false_alarm_causes.items()) or "none")
    if o.expected:
        s.add_row("expected findings (a benign GPU offset at or above the straggler floor)",
                  str(o.expected))
    if ev.straggler_causes:
        s.add_row("straggler false alarms by their GPU's / node's own cause",
                  ", ".join(f"{k} {v}" for k, v in ev.straggler_causes.items()))
    if o.basis:
        b = o.basis
        s.add_row("slow ranks: compute vs communication right / wrong / totals only",
                  f"{b.get('right', 0)} / {b.get('wrong', 0)} / {b.get('step', 0)}")
    s.add_row("drains right / wrong / missed / repeat",
              f"{o.drains.right} / {o.drains.wrong} / {o.drains.missed} / {o.drains.repeat}")
    s.add_row("GPU-hours lost without minutiae", f"{o.gpu_hours.without:.1f}")
    s.add_row("GPU-hours lost with minutiae", f"{o.gpu_hours.with_minutiae:.1f}")
    s.add_row("GPU-hours saved", f"{o.gpu_hours.saved:.1f}")
    d = Table(title="detectors", title_justify="left")
    for col in ("detector", "status", "inputs", "detections", "seconds", "what"):
        d.add_column(col)
    for r in ev.detectors:
        d.add_row(r.name, r.reason if r.available else f"not available: {r.reason}", str(r.inputs),
                  str(len(r.detections)), f"{r.seconds:.1f}", r.what)
    if not ds.damage:
        return Group(t, s, d)
    x = Table(title=f"damaged input: {len(ds.damage)} file(s); these node-windows are UNKNOWN "
                    "(nothing counted there)", title_justify="left")
    x.add_column("damage")
    for dmg in ds.damage[:DAMAGE_ROWS]:
        x.add_row(dmg.message())
    if len(ds.damage) > DAMAGE_ROWS:
        x.add_row(f"… {len(ds.damage) - DAMAGE_ROWS} more (--json lists them all)")
    return Group(t, s, d, x)

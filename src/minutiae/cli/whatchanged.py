"""``minutiae whatchanged RUN_A RUN_B``: side-by-side diff ranked by the history. No logic here."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from minutiae.cli.regress_common import (
    emit_json,
    history_options,
    load,
    make_console,
    pct,
    print_issues,
    when,
)


@click.command("whatchanged")
@click.argument("run_a")
@click.argument("run_b")
@history_options
@click.option("--top", default=25, show_default=True, help="differences to show")
def command(run_a: str, run_b: str, runs: Path | None, db: Path | None, since: str | None,
            as_json: bool, top: int, prom: str | None) -> None:
    """Everything that differs between RUN_A and RUN_B, ranked by how well it explains the change."""
    from minutiae.analyses.whatchanged.attribution import whatchanged

    history = load(runs, db, since, prom=prom)
    w = whatchanged(history.runs, run_a, run_b)
    if as_json:
        obj = w.to_json()
        obj["differences"] = obj["differences"][:top]
        obj["differences_total"] = len(w.differences)
        obj["issues"] = [i.to_json() for i in history.issues]
        emit_json(obj)
        return
    console = make_console()
    a, b = w.run_a, w.run_b
    side = Table(title=f"{a.run_id} → {b.run_id}")
    side.add_column("")
    side.add_column(a.run_id)
    side.add_column(b.run_id)
    side.add_row("signature", a.signature, b.signature)
    side.add_row("time (UTC)", when(a.time), when(b.time))
    side.add_row(a.metric.value, f"{a.value:.4g}", f"{b.value:.4g}")
    side.add_row("nodes", str(len(a.nodes)), str(len(b.nodes)))
    for k in sorted(set(a.attrs) | set(b.attrs)):
        va, vb = a.attr_text(k) or "(missing)", b.attr_text(k) or "(missing)"
        side.add_row(k, va, vb if va == vb else f"[bold]{vb}[/]")
    console.print(side)
    sure = (f"p = {w.p_value:.3g} against run-to-run noise of {pct(w.noise, False)}"
            if w.p_value is not None else "too few runs of this signature to judge the noise")
    console.print(f"{b.run_id} is {pct(w.change)} vs {a.run_id} ({sure}).", highlight=False)
    t = Table(title=f"What differed, ranked over {w.runs_used} runs")
    for col in ("#", "what", "A", "B", "effect of B's side", "net of others", "explains", "evidence"):
        t.add_column(col)
    for d in w.differences[:top]:
        t.add_row(str(d.rank), f"{d.kind}: {d.key}", d.a, d.b,
                  pct(d.effect.change) if d.effect else "untestable",
                  f"{pct(d.joint.change)} (p {d.joint.p_value:.2g})" if d.joint else "–",
                  "–" if d.explains is None else f"{d.explains * 100:.0f} %", d.summary)
    console.print(t if w.differences else "The two runs do not differ in anything recorded.")
    if len(w.differences) > top:
        console.print(f"… {len(w.differences) - top} more (--top)")
    if w.note:
        console.print(f"note: {w.note}", highlight=False)
    print_issues(console, history)

"""``minutiae impact --speedup 0.8% --where "NCCL>=2.21"``: what a change is worth. No logic here."""

from __future__ import annotations

from pathlib import Path

import click

from minutiae.cli.regress_common import (
    emit_json,
    history_options,
    load,
    make_console,
    pct,
    print_issues,
)


@click.command("impact")
@click.option("--speedup", required=True, help="measured step-time reduction, e.g. 0.8% (negative: a slowdown)")
@click.option("--where", "where_text", required=True, help='which runs benefit, e.g. "NCCL>=2.21"')
@history_options
def command(speedup: str, where_text: str, runs: Path | None, db: Path | None, since: str | None,
            as_json: bool, prom: str | None) -> None:
    """GPU-days per week a measured speed-up saves across the fleet's actual usage."""
    from minutiae.analyses.regress.impact import impact
    from minutiae.analyses.regress.where import parse_fraction, parse_where

    s = parse_fraction(speedup)
    history = load(runs, db, since, prom=prom)
    keys = sorted({k for r in history.runs for k in r.attrs})
    where = parse_where(where_text, keys)
    res = impact(history.runs, s, where)
    if as_json:
        obj = res.to_json()
        obj["issues"] = [i.to_json() for i in history.issues]
        emit_json(obj)
        return
    console = make_console()
    verb = "saves" if res.gpu_days_per_week >= 0 else "costs"
    console.print(f"A {pct(s, False)} shorter step on runs where {res.where} {verb} "
                  f"[bold]{abs(res.gpu_days_per_week):,.1f} GPU-days/week[/]", highlight=False)
    console.print(f"  {res.runs_matched} of {res.runs_total} runs match ({pct(res.share, False)} of "
                  f"GPU-hours: {res.gpu_hours_matched:,.0f} GPU-hours over {res.weeks:.1f} weeks)", highlight=False)
    if res.low is not None and res.high is not None:
        console.print(f"  week to week: {res.low:,.1f} to {res.high:,.1f} GPU-days", highlight=False)
    if res.runs_unknown:
        console.print(f"  [yellow]{res.runs_unknown} runs lack an attribute of the filter: left out[/]")
    if res.runs_without_usage:
        console.print(f"  [yellow]{res.runs_without_usage} matching runs lack GPU count or duration: "
                      "left out[/]")
    print_issues(console, history)

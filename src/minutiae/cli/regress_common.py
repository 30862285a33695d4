"""Options and loading shared by ``regress``, ``whatchanged`` and ``impact`` (no analysis here)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from minutiae.analyses.regress.where import parse_duration
from minutiae.clock import Clock, SystemClock
from minutiae.history.read import History, load_history

F = TypeVar("F", bound=Callable[..., Any])


def history_options(func: F) -> F:
    func = click.option("--db", "db", type=click.Path(path_type=Path), default=None,
                        help="the controller's SQLite file (tables runs_*)")(func)
    func = click.option("--runs", "runs", type=click.Path(path_type=Path), default=None,
                        help="runs CSV or Parquet: run_id,time,signature,seconds_per_step[,attributes…]")(func)
    func = click.option("--prom", "prom", default=None,
                        help="Prometheus URL exporting minutiae_run_seconds_per_step (one series per run)")(func)
    func = click.option("--since", default=None, help="only runs in this window before now, e.g. 14d")(func)
    func = click.option("--json", "as_json", is_flag=True, help="one JSON object on stdout")(func)
    return func


def load(runs: Path | None, db: Path | None, since: str | None, job: str | None = None,
         prom: str | None = None, clock: Clock | None = None) -> History:
    now = (clock or SystemClock()).now()
    start = now - parse_duration(since) if since else None
    return load_history(runs, db, now=now, since=start, signature=job, prom=prom)


def make_console() -> Console:
    """Rich console; wide when piped (rich would otherwise wrap tables at 80 columns)."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def when(t: float) -> str:
    try:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")
    except (ValueError, OverflowError, OSError):
        return f"{t:.0f}"


def pct(x: float | None, signed: bool = True) -> str:
    if x is None:
        return "–"
    return f"{x * 100:+.1f} %" if signed else f"{x * 100:.1f} %"


def emit_json(obj: dict[str, Any]) -> None:
    click.echo(json.dumps(obj, default=str))


def print_issues(console: Console, history: History) -> None:
    for issue in history.issues:
        console.print(f"[yellow]note[/]: {issue.message}", highlight=False)

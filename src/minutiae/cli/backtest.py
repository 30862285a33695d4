"""``minutiae backtest DIR --policy FILE [--against OTHER] [--json]`` (thin: no logic here)."""

from __future__ import annotations

import json
import os

import click

from minutiae.backtest.history import load_history
from minutiae.backtest.replay import replay
from minutiae.backtest.report import diff, render, render_diff, to_json
from minutiae.controller.policy import load_policy


@click.command("backtest")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False, path_type=str),
              default=None, help="Policy TOML to replay (default: the shipped policy).")
@click.option("--against", "other_path", type=click.Path(dir_okay=False, path_type=str),
              default=None, help="A second policy: replay both and show the difference node by node.")
@click.option("--step", "step_s", type=click.FloatRange(min=1.0), default=60.0, show_default=True,
              help="Seconds between reconcile steps.")
@click.option("--scheduler", type=click.Choice(["slurm", "kubernetes"]), default="slurm",
              show_default=True, help="Scheduler named in the undo commands.")
@click.option("--maintenance-window", "window_s", type=click.FloatRange(min=0.0), default=1800.0,
              show_default=True, help="Seconds a planned maintenance entry keeps its node out.")
@click.option("--ignore-maintenance", is_flag=True,
              help="Replay as if maintenance.csv did not exist (shows the alarms it prevents).")
@click.option("--jobs", type=click.IntRange(min=0), default=0, show_default=True,
              help="Processes that read a simulated dataset (0: one per CPU, at most 4).")
@click.option("--allow-damaged", is_flag=True,
              help="Replay a dataset whose fleet.csv, maintenance.csv or jobs.csv is damaged: "
                   "every node it affects is UNKNOWN (default: exit 3 naming the file and line).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def command(directory: str, policy_path: str | None, other_path: str | None, step_s: float,
            scheduler: str, window_s: float, ignore_maintenance: bool, jobs: int,
            allow_damaged: bool, as_json: bool) -> None:
    """Replay a recorded or simulated history through a policy: what it would have drained,
    missed and held back, and (with --against) how two policies differ, node by node."""
    policy = load_policy(policy_path)
    other = load_policy(other_path) if other_path else None
    history = load_history(directory, maintenance_window_s=window_s,
                           honour_maintenance=not ignore_maintenance,
                           jobs=jobs or min(4, os.cpu_count() or 1), allow_damaged=allow_damaged)
    a = replay(history, policy, step_s=step_s, scheduler=scheduler)
    b = replay(history, other, step_s=step_s, scheduler=scheduler) if other else None
    diffs = diff(a, b, history) if b is not None else None
    if as_json:
        doc = to_json(a, history)
        if b is not None and diffs is not None:
            doc["against"] = to_json(b, history)
            doc["diff"] = [d.to_json() for d in diffs]
        click.echo(json.dumps(doc, default=str))
        return
    lines = render(a, history, "A" if b is not None else "")
    if b is not None and diffs is not None:
        lines += ["", *render(b, history, "B"), "", *render_diff(a, b, diffs)]
    click.echo("\n".join(lines))

"""``minutiae eval DIR``: run minutiae's pipeline over a simulated dataset and score it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from minutiae.sim.eval.detectors import detectors as registered
from minutiae.sim.eval.evaluate import evaluate
from minutiae.sim.eval.report_text import console, scorecard


@click.command("eval")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="one JSON object (for machines)")
@click.option("--detector", "detectors", multiple=True,
              type=click.Choice([d.name for d in registered()]), help="only these detectors")
@click.option("--jobs", type=click.IntRange(1, 64), default=None,
              help="run the detectors in N worker processes (default: 2 from 100 node-days on, "
                   "else 1: in this process)")
@click.option("--allow-damaged", is_flag=True,
              help="score a dataset whose fleet.csv, jobs.csv, maintenance.csv, boots.csv, runs.csv "
                   "or telemetry.parquet is damaged: the nodes it affects are UNKNOWN (default: exit 3)")
def command(directory: Path, as_json: bool, detectors: tuple[str, ...], jobs: int | None,
            allow_damaged: bool) -> None:
    """Score minutiae's detectors against DIRECTORY's truth.jsonl (a `minutiae sim` dataset)."""
    ev = evaluate(directory, detectors or None, jobs=jobs, allow_damaged=allow_damaged)
    if as_json:
        click.echo(json.dumps(ev.to_json(), sort_keys=True))
        return
    console().print(scorecard(ev))

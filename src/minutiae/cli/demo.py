"""``minutiae demo``: simulate a fleet, run minutiae over it, print the scorecard and write an
HTML report (the README's main-job command: ``make demo``)."""

from __future__ import annotations

from pathlib import Path

import click

from minutiae.cli.numbers import Finite
from minutiae.sim.api import DEMO_RATE_SCALE, run_sim
from minutiae.sim.demo import write_report
from minutiae.sim.eval.evaluate import evaluate
from minutiae.sim.eval.progress import progress_bar
from minutiae.sim.eval.report_text import console, scorecard


@click.command("demo")
@click.option("--nodes", default=128, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--gpus-per-node", default=8, show_default=True, type=click.IntRange(1, 16))
@click.option("--days", default=3.0, show_default=True, type=Finite(0.01, 366))
@click.option("--seed", default=1, show_default=True, type=click.IntRange(0, 2**63 - 1))
@click.option("--out", default=Path("demo-out"), show_default=True, type=click.Path(path_type=Path),
              help="dataset directory")
@click.option("--report", default=Path("minutiae-report"), show_default=True,
              type=click.Path(path_type=Path), help="report directory (index.html)")
@click.option("--rate-scale", default=DEMO_RATE_SCALE, show_default=True, type=Finite(0, 1000),
              help="fault rates x this (the literature rates give ~1 fault per 3 days on 128 nodes)")
@click.option("--noise-scale", default=None, type=Finite(0, 1000),
              help="must-not-alarm event rates x this [default: the same as --rate-scale]")
@click.option("--quiet", is_flag=True, help="no progress bar")
def command(nodes: int, gpus_per_node: int, days: float, seed: int, out: Path, report: Path,
            rate_scale: float, noise_scale: float | None, quiet: bool) -> None:
    """Simulate NODES x GPUS for DAYS, score minutiae on it, write REPORT/index.html."""
    con = console()
    with progress_bar(quiet) as prog:
        s = run_sim(out, nodes=nodes, gpus_per_node=gpus_per_node, days=days, seed=seed,
                    rate_scale=rate_scale, noise_scale=noise_scale, progress=prog)
    con.print(f"simulated {s.nodes} nodes x {s.gpus_per_node} GPUs for {s.days:g} days "
                  f"(fault rates x{rate_scale:g}, must-not-alarm rates "
                  f"x{rate_scale if noise_scale is None else noise_scale:g}): {s.faults} faults, {s.benign} must-not-alarm events -> {out}")
    ev = evaluate(out, progress=None if quiet else lambda name: con.print(f"running {name} ..."))
    con.print(scorecard(ev))
    path = write_report(ev, report)
    con.print(f"report: {path}")

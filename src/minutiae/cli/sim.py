"""``minutiae sim``: simulate a GPU fleet and write a dataset in real formats plus its truth."""

from __future__ import annotations

from pathlib import Path

import click

from minutiae.cli.numbers import Finite
from minutiae.sim.api import DEFAULT_START, parse_rates, run_sim
from minutiae.sim.eval.progress import progress_bar


@click.command("sim")
@click.option("--nodes", default=256, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--gpus-per-node", default=8, show_default=True, type=click.IntRange(1, 16))
@click.option("--days", default=7.0, show_default=True, type=Finite(0.01, 366))
@click.option("--seed", default=1, show_default=True, type=click.IntRange(0, 2**63 - 1))
@click.option("--out", required=True, type=click.Path(path_type=Path), help="dataset directory")
@click.option("--profile", type=click.Path(path_type=Path), default=None,
              help="fault profile TOML (default: the packaged literature profile)")
@click.option("--rate-scale", default=1.0, show_default=True, type=Finite(0, 1000),
              help="multiply every fault rate")
@click.option("--noise-scale", default=None, type=Finite(0, 1000),
              help="multiply the must-not-alarm event rates (app Xids, planned reboots, teardown "
                   "lines) [default: the same as --rate-scale]")
@click.option("--rate", "rates", multiple=True, metavar="CLASS=VALUE", help="set one class's rate")
@click.option("--start", default=DEFAULT_START, show_default=True, help="simulated start time (ISO)")
@click.option("--quiet", is_flag=True, help="no progress bar")
def command(nodes: int, gpus_per_node: int, days: float, seed: int, out: Path, profile: Path | None,
            rate_scale: float, noise_scale: float | None, rates: tuple[str, ...], start: str,
            quiet: bool) -> None:
    """Simulate NODES x GPUS-PER-NODE for DAYS and write the dataset to OUT (docs/dataset.md)."""
    with progress_bar(quiet) as prog:
        s = run_sim(out, nodes=nodes, gpus_per_node=gpus_per_node, days=days, seed=seed,
                    profile=profile, rate_scale=rate_scale, rates=parse_rates(rates), start=start,
                    progress=prog, noise_scale=noise_scale)
    c = s.counts
    click.echo(f"wrote {s.out}: {s.nodes} nodes x {s.gpus_per_node} GPUs, {s.days:g} days, seed {s.seed}, "
               f"profile {s.profile}; {s.faults} faults + {s.benign} must-not-alarm events in truth.jsonl; "
               f"{c['kern_lines']} kernel-log lines, {c['ib_rows']} IB rows, {c['telemetry_rows']} telemetry "
               f"rows, {c['jobs']} jobs ({c['timing_rows']} timing rows)")

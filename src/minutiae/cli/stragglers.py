"""``minutiae stragglers FILE... [--json] [--follow]`` (thin: parsing and maths live elsewhere).

Exit status: 0 no suspect, 1 suspects or stopped ranks found, 3 unusable input. A training log
with only rank 0's step times (or slowest-rank reports) gets the job-level report instead
(``joblevel.analyse_job``): 1 when it names a suspect or the step time got slower, else 0.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from minutiae.cli.numbers import Finite
from minutiae.clock import SystemClock

if TYPE_CHECKING:
    import polars as pl

    from minutiae.analyses.stragglers.analysis import Options
    from minutiae.analyses.stragglers.formats import TrainLog
    from minutiae.analyses.stragglers.layout import Layout
    from minutiae.analyses.stragglers.prep import TimingMatrix
    from minutiae.analyses.stragglers.types import StragglerReport


def _load(paths: list[Path], fleet: Path | None,
          ) -> tuple[TimingMatrix | pl.DataFrame | TrainLog, str, dict[str, str] | None,
                     Layout | None]:
    """The matrix of a file of the common layout (``ingest``: no long table is built), else
    the long table (or a training log without per-rank times); and the parallel layout the
    logs print, if any."""

    from minutiae.analyses.stragglers import prep
    from minutiae.analyses.stragglers.ingest import read_matrix
    from minutiae.analyses.stragglers.read import find_fleet, fleet_leaves, read_with_layout

    where = ", ".join(str(p) for p in paths)
    got: TimingMatrix | pl.DataFrame | TrainLog | None = read_matrix(paths)
    layout = None
    if got is None:
        from minutiae.analyses.stragglers.formats import TrainLog

        got, notes, layout = read_with_layout(paths)
        for note in notes:
            click.echo(f"minutiae: warning: skipped {note}", err=True)
        if isinstance(got, TrainLog):
            return got, where, None, None
    fleet = fleet or find_fleet(paths)
    leaf_of = fleet_leaves(fleet) if fleet else None
    if leaf_of and isinstance(got, prep.TimingMatrix):  # as prepare does for the long table
        got = dataclasses.replace(got, leaf=prep.leaves(got.node, got.leaf, leaf_of))
    return got, where, leaf_of, layout


def _table(report: StragglerReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title=f"stragglers: {report.ranks} ranks, steps {report.first_step}-"
                    f"{report.last_step}, noise {report.noise:.1%}, peers {report.grouping}")
    for col in ("where", "scope", "rank", "basis", "slower", "95% CI", "since", "found",
                "GPU-h/d"):
        t.add_column(col, justify="right" if col in ("rank", "since", "found", "GPU-h/d") else "left")
    for s in report.suspects:
        ranks = str(s.rank) if len(s.ranks) == 1 else f"{s.rank} (+{len(s.ranks) - 1})"
        t.add_row(s.component, s.scope.value, ranks, s.basis.value,
                  f"{s.slowdown:+.1%}", f"{s.ci_low:+.1%}..{s.ci_high:+.1%}", str(s.since_step),
                  str(s.detected_step), f"{s.gpu_hours_per_day:,.1f}")
    console.print(t if report.suspects else "no straggler found")
    if report.slowest:
        console.print(f"slowest GPUs below the {report.min_slowdown:.0%} floor (not suspects; "
                      "what each costs at most if left):")
        for g in report.slowest:
            console.print(f"  {g.component}  {g.slowdown:+.2%} ({g.ci_low:+.2%}..{g.ci_high:+.2%})"
                          f"  {g.gpu_hours_per_day:,.1f} GPU-h/day")
    if report.workload is not None:
        console.print(f"workload imbalance: {report.workload.pattern}")
    for change in report.job_level:
        console.print(f"job level: {change.text()}")
    for limit in report.data_limits:
        console.print(f"cannot show: {limit}")
    for st in report.stopped:
        console.print(f"rank {st.rank} ({st.node or 'node unknown'}) stopped reporting after "
                      f"step {st.last_step} (job at step {st.job_last_step})")
    for w in report.warnings:
        click.echo(f"warning: {w}", err=True)


@click.command("stragglers")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="one JSON object (DESIGN.md contract)")
@click.option("--follow", is_flag=True, help="stream a growing CSV and report suspects as found")
@click.option("--fleet", type=click.Path(path_type=Path), help="fleet.csv (node,leaf) for leaf localisation")
@click.option("--warmup", default=20, show_default=True, help="calibration steps")
@click.option("--false-alarms", default=0.1, show_default=True, type=Finite(0, 1000, min_open=True),
              help="target false alarms per 1,000 node-days (sets the thresholds)")
@click.option("--ranks-per-node", type=click.IntRange(min=1), help="default: from the node column, else 8")
@click.option("--idle-exit", type=Finite(0, 1e9), default=0.0,
              help="with --follow: stop after this many seconds without new rows (0: never)")
@click.option("--poll", type=Finite(0.001, 3600), default=0.2, show_default=True, help="--follow poll interval (s)")
@click.option("--min-slowdown", default=0.03, show_default=True,
              help="floor a suspect must reach (0.03 = 3 %); slower GPUs below it are listed")
@click.option("--layout", "layout_text", metavar="tp=N,pp=N,dp=N[,cp=N][,ep=N][,order=O]",
              help="parallel layout (order: megatron [default], megatron-tp-pp-dp, torchtitan); "
                   "pipeline stages become peer groups")
def command(files: tuple[Path, ...], as_json: bool, follow: bool, fleet: Path | None, warmup: int,
            false_alarms: float, ranks_per_node: int | None, idle_exit: float, poll: float,
            min_slowdown: float, layout_text: str | None) -> int:
    """Find the slow GPU, node or link of a synchronous job from per-rank step timings
    (CSV/Parquet step,rank,seconds[,node,gpu,stage,section] or a Megatron-LM log)."""
    from minutiae.analyses.stragglers.analysis import Options, analyse
    from minutiae.errors import ConfigError

    if warmup < 3 or false_alarms <= 0:
        raise ConfigError("--warmup must be >= 3 and --false-alarms > 0")
    if not 0 <= min_slowdown < 1:
        raise ConfigError(f"--min-slowdown must be in [0, 1) (a fraction: 0.03 = 3 %), "
                          f"got {min_slowdown}")
    from minutiae.analyses.stragglers.layout import Layout

    options = Options(warmup=warmup, false_alarms=false_alarms, ranks_per_node=ranks_per_node,
                      min_slowdown=min_slowdown,
                      layout=Layout.parse(layout_text) if layout_text else None)
    if follow:
        return _follow(list(files), fleet, options, as_json, idle_exit, poll)
    got, where, leaves, printed = _load(list(files), fleet)
    if options.layout is None and printed is not None:  # --layout wins over the log's
        options = dataclasses.replace(options, layout=printed)
    from minutiae.analyses.stragglers.prep import TimingMatrix

    if isinstance(got, TimingMatrix):
        report = analyse(got, options, where)
    else:
        from minutiae.analyses.stragglers.formats import TrainLog

        if isinstance(got, TrainLog):
            return _job_level(got, where, as_json, warmup)
        from minutiae.analyses.stragglers.runs import analyse_runs  # polars: the long table

        report = analyse_runs(got, where, leaves, options)
    if as_json:
        click.echo(json.dumps(report.to_json()))
    else:
        _table(report)
    return 1 if report.suspects or report.stopped else 0


def _job_level(log: TrainLog, where: str, as_json: bool, warmup: int) -> int:
    from minutiae.analyses.stragglers.formats.view import refusal
    from minutiae.analyses.stragglers.joblevel import analyse_job

    report = analyse_job(log, warmup=warmup)
    why = refusal(log)
    if as_json:
        click.echo(json.dumps({**report.straggler_json(), "per_rank": why}))
    else:
        click.echo(f"minutiae: note: {where}: {why}", err=True)
        click.echo("no per-rank times in the log: job-level report (step times of one rank, "
                   "the slowest ranks the log names)")
        for line in report.lines():
            click.echo(line)
    return 1 if report.suspects or report.slowdowns else 0


def _follow(paths: list[Path], fleet: Path | None, options: Options, as_json: bool,
            idle_exit: float, poll: float) -> int:
    import polars as pl

    from minutiae.analyses.stragglers.parse import parse_csv
    from minutiae.analyses.stragglers.read import CsvTail, find_fleet, fleet_leaves
    from minutiae.analyses.stragglers.stream import StragglerStream
    from minutiae.errors import ConfigError

    if len(paths) != 1:
        raise ConfigError("--follow takes one growing CSV file")
    clock = SystemClock()
    fleet = fleet or find_fleet(paths)
    stream = StragglerStream(options, str(paths[0]), fleet_leaves(fleet) if fleet else None)
    tail = CsvTail(paths[0])
    last = clock.monotonic()
    try:
        while True:
            data = tail.read()
            if data.strip() and tail.header:
                last = clock.monotonic()
                for s in stream.feed(parse_csv(data, str(paths[0]), tail.header)):
                    click.echo(json.dumps({"event": "suspect", **s.to_json()}) if as_json else
                               f"step {s.detected_step}: {s.component} {s.slowdown:+.1%} "
                               f"since step {s.since_step} ({s.basis.value}, "
                               f"{s.gpu_hours_per_day:,.1f} GPU-h/day)")
            elif idle_exit and clock.monotonic() - last >= idle_exit:
                break
            else:
                clock.sleep(poll)
    except KeyboardInterrupt:
        pass
    for s in stream.feed(pl.DataFrame(), final=True):
        click.echo(json.dumps({"event": "suspect", **s.to_json()}) if as_json else
                   f"step {s.detected_step}: {s.component} {s.slowdown:+.1%}")
    report = stream.report()
    if report is None:
        click.echo("minutiae: warning: fewer steps than the warm-up window; nothing tested",
                   err=True)
        return 3
    if as_json:
        click.echo(json.dumps({"event": "report", **report.to_json()}))
    else:
        _table(report)
    return 1 if report.suspects or report.stopped else 0

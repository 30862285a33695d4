"""``minutiae slownodes DIR|--prometheus URL [--json]`` (thin: maths in analyses.slownodes).

Exit status: 0 nothing persistently slow, 1 findings, 3 unusable input or unreachable source.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from minutiae.analyses.slownodes.analysis import SlowReport

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")


def _seconds(text: str) -> float:
    from minutiae.errors import ConfigError

    m = _DURATION.match(text.strip())
    if not m:
        raise ConfigError(f"not a duration: {text!r} (e.g. 90s, 30m, 6h, 2d)")
    return float(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]


def _table(report: SlowReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not report.findings:
        console.print(f"no persistently slow GPU or node among {report.gpus} GPUs on "
                      f"{report.nodes} nodes ({report.samples} busy samples)"
                      + (f"; {len(report.unknown)} node/GPU window(s) UNKNOWN (no telemetry)"
                         if report.unknown else ""))
    else:
        t = Table(title=f"slow GPUs/nodes: {report.gpus} GPUs on {report.nodes} nodes, "
                        f"peer noise {report.noise:.2%}")
        for col in ("node", "gpu", "scope", "metric", "below peers", "for", "reasons"):
            t.add_column(col)
        for f in report.findings:
            t.add_row(f.node, "-" if f.gpu is None else str(f.gpu), f.scope, f.metric,
                      f"{f.deficit:+.0f} C" if f.metric == "thermal" else f"{f.deficit:.1%}",
                      f"{f.duration_s / 60:.0f} min",
                      ", ".join(f.reasons) or "-")
        console.print(t)
        for f in report.findings:
            console.print(f"- {f.evidence}")
    for u in report.unknown:
        console.print(f"- {u.text}", highlight=False, markup=False)
    for w in report.warnings:
        click.echo(f"warning: {w}", err=True)


@click.command("slownodes")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("--prometheus", "prom_url", help="read DCGM fields from this Prometheus instead")
@click.option("--since", default="6h", show_default=True, help="--prometheus: window to read")
@click.option("--step", default="60s", show_default=True, help="--prometheus: sample step")
@click.option("--fleet", type=click.Path(path_type=Path), help="fleet.csv (node,sku,rack)")
@click.option("--jobs", type=click.Path(path_type=Path), help="jobs.csv (job_id,start,end,nodes)")
@click.option("--min-duration", default="30m", show_default=True, help="shortest episode reported")
@click.option("--min-deficit", default=0.03, show_default=True, help="smallest deficit reported")
@click.option("--json", "as_json", is_flag=True, help="one JSON object with suspects")
def command(directory: Path | None, prom_url: str | None, since: str, step: str,
            fleet: Path | None, jobs: Path | None, min_duration: str, min_deficit: float,
            as_json: bool) -> int:
    """Rank every GPU and node against its peers from passive telemetry (SM clock, clock-event
    reasons, power at a given utilisation, temperature at a given power, throughput per watt,
    PCIe replays, NVLink errors, IB throughput) and report every persistently worse episode,
    with the evidence; windows without telemetry are reported UNKNOWN."""
    from minutiae.analyses.slownodes.analysis import SlowOptions, analyse_telemetry
    from minutiae.errors import ConfigError

    if (directory is None) == (prom_url is None):
        raise ConfigError("give a dataset DIRECTORY or --prometheus URL (one of them)")
    opts = SlowOptions(min_deficit=min_deficit, min_duration=_seconds(min_duration))
    fleet_df = jobs_df = None
    if directory is not None:
        from minutiae.analyses.slownodes.read import read_dataset

        tel, fleet_df, jobs_df = read_dataset(directory)
        where = str(directory)
    else:
        from minutiae.analyses.slownodes.parse_prometheus import DCGM_COLUMNS, dcgm_telemetry
        from minutiae.analyses.slownodes.read_prometheus import Prometheus, fetch_dcgm
        from minutiae.clock import SystemClock

        assert prom_url is not None
        end = SystemClock().now()
        step_s = _seconds(step)
        if step_s <= 0:   # Prometheus.query_range raised ValueError: a traceback
            raise ConfigError(f"--step must be more than 0 s, got {step!r}")
        results = fetch_dcgm(Prometheus(prom_url), end - _seconds(since), end, step_s,
                             DCGM_COLUMNS)
        if "sm_clock_mhz" not in results:
            from minutiae.errors import DataError

            raise DataError("no DCGM_FI_DEV_SM_CLOCK series in the window (is dcgm-exporter "
                            "scraped?)", prom_url)
        tel, where = dcgm_telemetry(results, prom_url), prom_url
    if fleet is not None or jobs is not None:
        from minutiae.analyses.slownodes.read import FLEET_COLUMNS, JOBS_COLUMNS, read_side_table

        if fleet is not None:
            fleet_df = read_side_table(fleet, "fleet CSV", FLEET_COLUMNS)
        if jobs is not None:
            jobs_df = read_side_table(jobs, "jobs CSV", JOBS_COLUMNS)
    report = analyse_telemetry(tel, fleet_df, jobs_df, opts, where)
    if as_json:
        click.echo(json.dumps(report.to_json()))
    else:
        _table(report)
    return 1 if report.findings else 0

"""``minutiae check``: one-shot node health check (Nagios exit code; Slurm HealthCheckProgram)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from minutiae.cli.numbers import Finite
from minutiae.model import Status
from minutiae.node.config import click_options, config_from_options

if TYPE_CHECKING:
    from minutiae.agent.healthcheck import SlurmStep
    from minutiae.node.check import NodeReport

_STYLE = {"ok": "green", "warning": "yellow", "critical": "bold red", "unknown": "magenta"}


@click.command(name="check")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click_options("check")
@click.option("--state-file", type=click.Path(path_type=Path), default=None,
              help="Keeps counter values between runs so rates (errors/hour) work.")
@click.option("--node", default=None, help="Node name (default $SLURMD_NODENAME or the short hostname).")
@click.option("--slurm", is_flag=True, help="Drain this node on a fault that needs reset_gpu or more; "
              "resume it when healthy if minutiae drained it (never an admin's drain).")
@click.option("--slurm-conf", default=None, help="slurm.conf path (default $SLURM_CONF).")
@click.option("--slurm-timeout", type=Finite(1, 600), default=30.0, show_default=True,
              help="Seconds to wait for scontrol.")
def command(as_json: bool, state_file: Path | None, node: str | None, slurm: bool, slurm_conf: str | None,
            slurm_timeout: float, **sources: Any) -> int:
    """Check this node (or captured data) once: GPUs, InfiniBand, PCIe, kernel log.

    Exit code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
    """
    from minutiae.clock import SystemClock
    from minutiae.node.check import run_check

    name = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    cfg = config_from_options(sources, "check", state_file=state_file, node=name)
    step = None
    if slurm:
        from minutiae.agent.healthcheck import check_with_slurm
        from minutiae.schedulers.base import HCP_OWNER
        from minutiae.schedulers.slurm.backend import SlurmBackend

        backend = SlurmBackend(slurm_conf, timeout_s=slurm_timeout, owner=HCP_OWNER)
        report, step = check_with_slurm(cfg, SystemClock(), backend)
    else:
        report = run_check(cfg, SystemClock())
    if as_json:
        doc = report.to_json()
        if step is not None:
            doc["slurm"] = step.to_json()
        click.echo(json.dumps(doc, default=str))
    elif slurm or not sys.stdout.isatty():
        _render_plain(report, step)  # a log file (HealthCheckProgram) or a pipe: no rich import
    else:
        _render(report, step)
    return int(report.status)


def _rows(report: NodeReport) -> list[tuple[str, str, str, list[str], str | None]]:
    """(check, status, read, finding lines, reason) per check: what both renderings show."""
    rows = []
    for r in report.results:
        counts: dict[str, int] = {}
        for f in r.findings:
            line = f"{f.severity.label}: {f.message}" + (f" → {f.action.label}" if f.action.label != "none" else "")
            n = f.attrs.get("count", 1)
            counts[line] = counts.get(line, 0) + (n if isinstance(n, int) else 1)
        lines = [line + (f" (×{n})" if n > 1 else "") for line, n in counts.items()]
        if len(lines) > 12:
            lines = [*lines[:12], f"… {len(lines) - 12} more (use --json)"]
        rows.append((r.check, r.status.label, str(r.observed), lines, r.reason))
    return rows


def _headline(report: NodeReport) -> tuple[str, str]:
    reason = report.reason()
    return report.status.label, f"action needed: {report.action.label}" + (f"  — {reason}" if reason else "")


def _step_line(step: SlurmStep | None) -> str | None:
    if step is None:
        return None
    return (f"slurm: {step.outcome.value} {step.node}" + (f" ({step.reason})" if step.reason else "")
            + (f" — {step.detail}" if step.detail else ""))


def _render_plain(report: NodeReport, step: SlurmStep | None) -> None:
    status, rest = _headline(report)
    out = [f"{report.node}: {status.upper()}  {rest}", f"{'check':<11} {'status':<9} {'read':>6}  findings / reason"]
    for check, st, read, lines, reason in _rows(report):
        texts = [*lines, *([reason] if reason else [])] or ["—"]
        out.append(f"{check:<11} {st.upper():<9} {read:>6}  {texts[0]}")
        out.extend(f"{'':<28}  {t}" for t in texts[1:])
    out.extend(f"note: {note}" for note in report.notes)
    if (line := _step_line(step)) is not None:
        out.append(line)
    if report.status is Status.OK and not report.findings:
        out.append("all checks passed")
    click.echo("\n".join(out))


def _render(report: NodeReport, step: SlurmStep | None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(highlight=False)
    status, rest = _headline(report)
    console.print(f"[bold]{report.node}[/]: [{_STYLE[status]}]{status.upper()}[/]  {escape(rest)}")
    table = Table(show_header=True, header_style="bold", expand=False)
    for col in ("check", "status", "read", "findings / reason"):
        table.add_column(col)
    for check, st, read, lines, reason in _rows(report):
        text = escape("\n".join(lines))
        if reason:
            text = (text + "\n" if text else "") + f"[magenta]{escape(reason)}[/]"
        table.add_row(check, f"[{_STYLE[st]}]{st.upper()}[/]", read, text or "—")
    console.print(table)
    for note in report.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    if (line := _step_line(step)) is not None:
        console.print(escape(line))
    if report.status is Status.OK and not report.findings:
        console.print("[green]all checks passed[/]")

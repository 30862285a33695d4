"""``minutiae check``: one-shot node health check (Nagios exit code; Slurm HealthCheckProgram)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from minutiae.model import Status

if TYPE_CHECKING:
    from minutiae.agent.healthcheck import SlurmStep
    from minutiae.node.check import NodeReport

_STYLE = {"ok": "green", "warning": "yellow", "critical": "bold red", "unknown": "magenta"}


@click.command(name="check")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option("--sysfs-root", type=click.Path(path_type=Path), default=None,
              help="Root of a sysfs tree (default /sys): class/infiniband, bus/pci/devices.")
@click.option("--proc-root", type=click.Path(path_type=Path), default=None,
              help="Root of a procfs tree for uptime (boot grace of IB port rules); default /proc, "
              "but none with --sysfs-root (a capture is never judged by this machine's uptime).")
@click.option("--kmsg", type=click.Path(path_type=Path), default=None,
              help="Kernel log file to scan (default /dev/kmsg on this node).")
@click.option("--nvidia-smi-xml", type=click.Path(path_type=Path), default=None,
              help="nvidia-smi -q -x (or -q) capture instead of NVML.")
@click.option("--dcgm", default=None, metavar="URL|FILE", help="dcgm-exporter /metrics URL or capture.")
@click.option("--nvlink-status", type=click.Path(path_type=Path), default=None,
              help="nvidia-smi nvlink --status capture (NVLink link states, matched by GPU UUID).")
@click.option("--ibstat", type=click.Path(path_type=Path), default=None,
              help="ibstat or ibstatus capture instead of sysfs for the IB check.")
@click.option("--expected-gpus", type=click.IntRange(0, 1024), default=None, help="GPUs this node must have.")
@click.option("--expected-driver", default=None, help="Driver version this node must run.")
@click.option("--no-nvml", is_flag=True, help="Never load NVML (GPU check UNKNOWN without a capture).")
@click.option("--state-file", type=click.Path(path_type=Path), default=None,
              help="Keeps counter values between runs so rates (errors/hour) work.")
@click.option("--node", default=None, help="Node name (default $SLURMD_NODENAME or the short hostname).")
@click.option("--slurm", is_flag=True, help="Drain this node on a fault that needs reset_gpu or more; "
              "resume it when healthy if minutiae drained it (never an admin's drain).")
@click.option("--slurm-conf", default=None, help="slurm.conf path (default $SLURM_CONF).")
@click.option("--slurm-timeout", type=click.FloatRange(1, 600), default=30.0, show_default=True,
              help="Seconds to wait for scontrol.")
@click.option("--checks", "only", default=None, metavar="LIST",
              help="Comma-separated subset of gpu,ib,pcie,kernel_log (default: all).")
@click.option("--year", type=int, default=None, help="Year for kernel-log timestamps without one.")
def command(
    as_json: bool, sysfs_root: Path | None, proc_root: Path | None, kmsg: Path | None, nvidia_smi_xml: Path | None,
    dcgm: str | None, nvlink_status: Path | None, ibstat: Path | None, expected_gpus: int | None, expected_driver: str | None, no_nvml: bool,
    state_file: Path | None, node: str | None, slurm: bool, slurm_conf: str | None, slurm_timeout: float,
    only: str | None, year: int | None,
) -> int:
    """Check this node (or captured data) once: GPUs, InfiniBand, PCIe, kernel log.

    Exit code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
    """
    from minutiae.clock import SystemClock
    from minutiae.node.check import CheckConfig, parse_checks, run_check

    captured = any(x is not None for x in (sysfs_root, nvidia_smi_xml, dcgm, ibstat, nvlink_status))
    kmsg_path = kmsg if kmsg is not None else (None if captured else Path("/dev/kmsg"))
    name = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    cfg = CheckConfig(
        sysfs_root=sysfs_root or Path("/sys"), kmsg=kmsg_path, nvidia_smi_xml=nvidia_smi_xml,
        dcgm=dcgm, nvlink_status=nvlink_status, ibstat=ibstat, expected_gpus=expected_gpus, expected_driver=expected_driver,
        state_file=state_file, node=name, use_nvml=not no_nvml, year=year, checks=parse_checks(only),
        proc_root=proc_root,
    )
    step = None
    if slurm:
        from minutiae.agent.healthcheck import check_with_slurm
        from minutiae.schedulers.slurm.backend import SlurmBackend

        report, step = check_with_slurm(cfg, SystemClock(), SlurmBackend(slurm_conf, timeout_s=slurm_timeout))
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

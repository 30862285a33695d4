"""``minutiae check``: one-shot node health check (Nagios exit code; Slurm HealthCheckProgram)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from minutiae.model import Status

_STYLE = {"ok": "green", "warning": "yellow", "critical": "bold red", "unknown": "magenta"}


@click.command(name="check")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option("--sysfs-root", type=click.Path(path_type=Path), default=None,
              help="Root of a sysfs tree (default /sys): class/infiniband, bus/pci/devices.")
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
    as_json: bool, sysfs_root: Path | None, kmsg: Path | None, nvidia_smi_xml: Path | None,
    dcgm: str | None, nvlink_status: Path | None, ibstat: Path | None, expected_gpus: int | None, expected_driver: str | None, no_nvml: bool,
    state_file: Path | None, node: str | None, slurm: bool, slurm_conf: str | None, slurm_timeout: float,
    only: str | None, year: int | None,
) -> int:
    """Check this node (or captured data) once: GPUs, InfiniBand, PCIe, kernel log.

    Exit code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
    """
    from minutiae.checks.node import CheckConfig, parse_checks, run_check
    from minutiae.clock import SystemClock

    captured = any(x is not None for x in (sysfs_root, nvidia_smi_xml, dcgm, ibstat, nvlink_status))
    kmsg_path = kmsg if kmsg is not None else (None if captured else Path("/dev/kmsg"))
    name = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    cfg = CheckConfig(
        sysfs_root=sysfs_root or Path("/sys"), kmsg=kmsg_path, nvidia_smi_xml=nvidia_smi_xml,
        dcgm=dcgm, nvlink_status=nvlink_status, ibstat=ibstat, expected_gpus=expected_gpus, expected_driver=expected_driver,
        state_file=state_file, node=name, use_nvml=not no_nvml, year=year, checks=parse_checks(only),
    )
    step = None
    if slurm:
        from minutiae.actions.slurm import SlurmBackend
        from minutiae.checks.node_slurm import check_with_slurm

        report, step = check_with_slurm(cfg, SystemClock(), SlurmBackend(slurm_conf, timeout_s=slurm_timeout))
    else:
        report = run_check(cfg, SystemClock())
    if as_json:
        doc = report.to_json()
        if step is not None:
            doc["slurm"] = step.to_json()
        click.echo(json.dumps(doc, default=str))
    else:
        _render(report, step)
    return int(report.status)


def _render(report: object, step: object) -> None:
    from rich.console import Console
    from rich.table import Table

    from minutiae.checks.node import NodeReport
    from minutiae.checks.node_slurm import SlurmStep

    assert isinstance(report, NodeReport)
    console = Console(highlight=False)
    st = report.status.label
    console.print(f"[bold]{report.node}[/]: [{_STYLE[st]}]{st.upper()}[/]  action needed: "
                  f"[bold]{report.action.label}[/]" + (f"  — {report.reason()}" if report.reason() else ""))
    table = Table(show_header=True, header_style="bold", expand=False)
    for col in ("check", "status", "read", "findings / reason"):
        table.add_column(col)
    for r in report.results:
        s = r.status.label
        counts: dict[str, int] = {}
        for f in r.findings:
            line = f"{f.severity.label}: {f.message}" + (f" → {f.action.label}" if f.action.label != "none" else "")
            n = f.attrs.get("count", 1)
            counts[line] = counts.get(line, 0) + (n if isinstance(n, int) else 1)
        lines = [line + (f" (×{n})" if n > 1 else "") for line, n in counts.items()]
        text = "\n".join(lines[:12])
        if len(lines) > 12:
            text += f"\n… {len(lines) - 12} more (use --json)"
        if r.reason:
            text = (text + "\n" if text else "") + f"[magenta]{r.reason}[/]"
        table.add_row(r.check, f"[{_STYLE[s]}]{s.upper()}[/]", str(r.observed), text or "—")
    console.print(table)
    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}")
    if isinstance(step, SlurmStep):
        console.print(f"slurm: {step.outcome.value} {step.node}" + (f" ({step.reason})" if step.reason else "")
                      + (f" — {step.detail}" if step.detail else ""))
    if report.status is Status.OK and not report.findings:
        console.print("[green]all checks passed[/]")

"""``minutiae neighbours``: processes outside a job that run on the job's CPUs, with their CPU
share, and the pinning that removes them. Thin: /proc in sources, logic in analyses."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from minutiae.cli.numbers import Finite
from minutiae.errors import ConfigError


@click.command("neighbours")
@click.option("--job-cpus", metavar="LIST", help="The job's CPUs, e.g. 1-51,105-155.")
@click.option("--pid", "pids", type=int, multiple=True, metavar="PID",
              help="A process of the job (repeatable); its descendants belong to the job too.")
@click.option("--proc-root", default="/proc", show_default=True, metavar="DIR")
@click.option("--cgroup-root", default="/sys/fs/cgroup", show_default=True, metavar="DIR")
@click.option("--interval", type=Finite(0, 3600), default=1.0, show_default=True,
              help="Seconds between the two samples for CPU share (0: no sampling).")
@click.option("--min-share", type=Finite(min=0), default=0.01, show_default=True,
              help="CPU share (1.0 = one CPU) above which an unpinned process counts.")
@click.option("--json", "as_json", is_flag=True)
def command(job_cpus: str | None, pids: tuple[int, ...], proc_root: str, cgroup_root: str,
            interval: float, min_share: float, as_json: bool) -> int:
    """Noisy neighbours on a job's CPUs and the taskset/systemd lines that move them."""
    from minutiae.analyses.topology.irqs import irq_report
    from minutiae.analyses.topology.neighbours import (
        find_neighbours,
        job_cpus_of,
        job_members,
        pinning,
    )
    from minutiae.analyses.topology.read_procs import (
        online_cpus,
        read_irqs,
        read_processes,
        sample_processes,
    )
    from minutiae.clock import SystemClock
    from minutiae.model.topology import format_cpulist, parse_cpulist

    if not job_cpus and not pids:
        raise ConfigError("give the job as --job-cpus LIST or --pid PID")
    if interval < 0:
        raise ConfigError("--interval must be >= 0")
    if not os.path.isdir(cgroup_root):  # optional (systemd units), but never silently missing
        click.echo(f"minutiae: warning: --cgroup-root {cgroup_root}: not a directory; the "
                   "processes' systemd units are unknown", err=True)
    if interval > 0:
        procs, shares = sample_processes(SystemClock(), interval, proc_root, cgroup_root)
        share_map: dict[int, float] | None = shares
    else:
        procs, share_map = read_processes(proc_root, cgroup_root), None
    if job_cpus:
        try:
            cpus = parse_cpulist(job_cpus)
        except ValueError as exc:
            raise ConfigError(f"--job-cpus {job_cpus!r}: {exc}") from None
    else:
        cpus = job_cpus_of(procs, pids)
    members = job_members(procs, pids) | {os.getpid()}  # never list ourselves
    machine = online_cpus(proc_root) or tuple(sorted({c for p in procs.values() for c in p.cpus}))
    found = find_neighbours(procs, cpus, members, share_map, machine, min_share)
    free = tuple(c for c in machine if c not in set(cpus))
    lines = pinning(found, free) if found and free else []
    irqs = irq_report(read_irqs(proc_root), procs, cpus)
    irq_lines = irqs.advice(cpus, free)
    if as_json:
        click.echo(json.dumps({
            "job_cpus": list(cpus), "job_pids": sorted(members), "free_cpus": list(free),
            "neighbours": [{"pid": n.pid, "name": n.name, "overlap": list(n.overlap),
                            "cpu_share": n.cpu_share, "on_job_cpu": n.on_job_cpu,
                            "unit": n.unit, "cmdline": n.cmdline} for n in found],
            "pinning": lines, "irq": irqs.to_json(), "irq_pinning": irq_lines}, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        con = Console()
        t = Table(title=f"{len(found)} neighbour(s) on job CPUs {format_cpulist(cpus)}")
        for col in ("pid", "name", "CPU share", "on job CPU", "overlap", "unit"):
            t.add_column(col)
        for n in found:
            t.add_row(str(n.pid), n.name,
                      "-" if n.cpu_share is None else f"{n.cpu_share:.0%}",
                      "yes" if n.on_job_cpu else "no", format_cpulist(n.overlap), n.unit or "-")
        con.print(t)
        if lines:
            con.print("# move them off the job's CPUs:", highlight=False)
            for ln in lines:
                con.print(ln, highlight=False, markup=False)
        elif found:
            con.print("no CPU outside the job to move them to", highlight=False)
        _print_irqs(con, irqs, irq_lines)
    return 1 if found or irqs.irqs else 0


def _print_irqs(con: Any, irqs: Any, lines: list[str]) -> None:
    from minutiae.model.topology import format_cpulist

    if irqs.unreadable:
        con.print("IRQs: UNKNOWN (interrupts unreadable)", highlight=False)
    elif irqs.irqs:
        con.print(f"{len(irqs.irqs)} IRQ(s) delivered to the job's CPUs:", highlight=False)
        for i in irqs.irqs[:50]:
            con.print(f"  IRQ {i.irq} {i.name}: may use {format_cpulist(i.overlap)}, "
                      f"{i.on_job} on job CPUs", highlight=False, markup=False)
    else:
        con.print("IRQs: none delivered to the job's CPUs", highlight=False)
    con.print("irqbalance: " + (f"running (pid {','.join(map(str, irqs.irqbalance))})"
                                if irqs.irqbalance else "not running"), highlight=False)
    for ln in lines:
        con.print(ln, highlight=False, markup=False)

"""Noisy neighbours: processes outside a job that may run on the job's CPUs, and the pinning
that moves them away (pure).

The job is given by its CPUs, or by its PIDs (then its CPUs are the union of their allowed
CPUs, and every descendant of those PIDs belongs to the job). Kernel threads are not listed
(per-CPU kthreads cannot move).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from minutiae.analyses.topology.parse.proc_status import ProcInfo, unit_of
from minutiae.errors import ConfigError
from minutiae.model.topology import format_cpulist

_UNIT = re.compile(r"^[A-Za-z0-9:_.@\\-]{1,200}\.(service|scope)$")


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A process that is not part of the job but may run on ``overlap`` (its allowed CPUs that
    are the job's). ``cpu_share``: CPU-seconds per second it used over the sample (1.0 = one
    busy CPU; None when not sampled); ``on_job_cpu``: it last ran on one of the job's CPUs."""

    pid: int
    name: str
    overlap: tuple[int, ...]
    cpu_share: float | None
    on_job_cpu: bool
    unit: str | None
    cmdline: str


def job_members(procs: Mapping[int, ProcInfo], pids: tuple[int, ...]) -> set[int]:
    """The given PIDs and all their descendants (from PPid)."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        if p.ppid is not None:
            children.setdefault(p.ppid, []).append(p.pid)
    out: set[int] = set()
    stack = [p for p in pids]
    while stack:
        pid = stack.pop()
        if pid in out:
            continue
        out.add(pid)
        stack.extend(children.get(pid, []))
    return out


def job_cpus_of(procs: Mapping[int, ProcInfo], pids: tuple[int, ...]) -> tuple[int, ...]:
    missing = [p for p in pids if p not in procs]
    if missing:
        raise ConfigError(f"no such process: {', '.join(map(str, missing))}")
    return tuple(sorted({c for p in pids for c in procs[p].cpus}))


def find_neighbours(procs: Mapping[int, ProcInfo], job_cpus: tuple[int, ...],
                    job_pids: set[int], shares: Mapping[int, float] | None = None,
                    all_cpus: tuple[int, ...] = (), min_share: float = 0.01) -> list[Neighbour]:
    """Processes outside ``job_pids`` whose allowed CPUs meet ``job_cpus``, busiest first.

    A process pinned to a subset of the machine that includes job CPUs is always listed. One
    that may run anywhere (the default affinity) is listed when it used at least ``min_share``
    of a CPU in the sample (or, without a sample, when it last ran on a job CPU), so idle
    daemons do not flood the list."""
    jc = set(job_cpus)
    everything = set(all_cpus)
    out = []
    for p in procs.values():
        if p.pid in job_pids or p.kernel:
            continue
        overlap = tuple(sorted(jc & set(p.cpus)))
        if not overlap:
            continue
        share = shares.get(p.pid) if shares is not None else None
        on_job = p.last_cpu is not None and p.last_cpu in jc
        unpinned = bool(everything) and set(p.cpus) >= everything
        if unpinned:
            busy = (share or 0.0) >= min_share if shares is not None else on_job
            if not busy:
                continue
        out.append(Neighbour(p.pid, p.name, overlap, share, on_job, unit_of(p.cgroup), p.cmdline))
    out.sort(key=lambda n: (-(n.cpu_share or 0.0), not n.on_job_cpu, n.pid))
    return out


def pinning(neighbours: list[Neighbour], free_cpus: tuple[int, ...]) -> list[str]:
    """Commands that move the neighbours to ``free_cpus``: ``systemctl set-property`` for
    systemd services (cgroup v2 ``AllowedCPUs=``, persistent) and ``taskset -a -p -c`` for the
    other processes (all threads; lost on restart)."""
    if not free_cpus:
        raise ConfigError("no CPU outside the job to move neighbours to")
    cpus = format_cpulist(free_cpus)
    lines: list[str] = []
    units = sorted({n.unit for n in neighbours if n.unit and _UNIT.fullmatch(n.unit)
                    and n.unit.endswith(".service")})
    for u in units:
        lines.append(f"systemctl set-property {u} AllowedCPUs={cpus}")
    for n in neighbours:
        if n.unit in units:
            continue
        lines.append(f"taskset -a -p -c {cpus} {int(n.pid)}  # {re.sub(r'[^A-Za-z0-9_.:/ -]', '?', n.name)}")
    return lines

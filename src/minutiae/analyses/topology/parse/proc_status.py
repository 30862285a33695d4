"""``/proc/<pid>/{status,stat,cgroup}`` text → values (pure).

``status``: ``Name``, ``PPid``, ``Tgid``, ``Cpus_allowed_list`` (the CPUs the scheduler may use
for the task: taskset/cgroup cpuset combined). ``stat``: ``utime``/``stime`` (fields 14-15, clock
ticks) and ``processor`` (field 39, the CPU it last ran on); the command name (field 2) may hold
spaces and parentheses, so fields are counted after the *last* ``)``. ``cgroup``: the cgroup v2
path (``0::/system.slice/foo.service``) or, on v1, the ``cpuset`` controller's path.
"""

from __future__ import annotations

from dataclasses import dataclass

from minutiae.model.topology import parse_cpulist


@dataclass(frozen=True, slots=True)
class ProcStatus:
    name: str
    ppid: int | None
    tgid: int | None
    cpus_allowed: tuple[int, ...] | None


def parse_status(text: str) -> ProcStatus:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            fields[k.strip()] = v.strip()

    def num(key: str) -> int | None:
        try:
            return int(fields[key])
        except (KeyError, ValueError):
            return None

    cpus: tuple[int, ...] | None
    try:
        cpus = parse_cpulist(fields["Cpus_allowed_list"])
    except (KeyError, ValueError):
        cpus = None
    return ProcStatus(name=fields.get("Name", "?"), ppid=num("PPid"), tgid=num("Tgid"),
                      cpus_allowed=cpus)


@dataclass(frozen=True, slots=True)
class ProcStat:
    ticks: int  # utime + stime
    processor: int | None


def parse_stat(text: str) -> ProcStat | None:
    """None when the line is truncated or not a stat line."""
    _, sep, rest = text.rpartition(")")
    if not sep:
        return None
    f = rest.split()
    # rest starts at field 3 (state): utime is field 14 → f[11], stime f[12], processor f[36]
    try:
        ticks = int(f[11]) + int(f[12])
    except (IndexError, ValueError):
        return None
    try:
        cpu: int | None = int(f[36])
    except (IndexError, ValueError):
        cpu = None
    return ProcStat(ticks=ticks, processor=cpu)


def parse_cgroup(text: str) -> str | None:
    v2 = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2 = path
        elif "cpuset" in controllers.split(","):
            return path
    return v2


def unit_of(cgroup: str | None) -> str | None:
    """The systemd unit owning a cgroup path (``/system.slice/sshd.service`` → ``sshd.service``)."""
    if not cgroup:
        return None
    for part in reversed(cgroup.strip("/").split("/")):
        if part.endswith((".service", ".scope")) and not part.startswith("init.scope"):
            return part
    return None


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """One process: ``cpus`` it may run on (``Cpus_allowed_list``, narrowed by its cgroup's
    effective cpuset when readable), ``ticks`` of CPU time so far, ``last_cpu`` it ran on,
    ``kernel`` for kernel threads (no command line; children of kthreadd)."""

    pid: int
    name: str
    ppid: int | None
    cpus: tuple[int, ...]
    ticks: int
    last_cpu: int | None
    cgroup: str | None
    kernel: bool
    cmdline: str

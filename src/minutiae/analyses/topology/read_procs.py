"""Processes and their CPU placement from ``/proc`` (root injectable) and the cgroup cpuset
files (``<cgroup_root>/<path>/cpuset.cpus.effective``), sampled twice for CPU share.

Time is injected: ``sample_processes`` sleeps on the given ``Clock`` between the two reads.
A process that vanishes between reads is dropped (it is not a neighbour any more).
"""

from __future__ import annotations

import os
from pathlib import Path

from minutiae.analyses.topology.parse.irq import Irq, parse_interrupts
from minutiae.analyses.topology.parse.proc_status import (
    ProcInfo,
    parse_cgroup,
    parse_stat,
    parse_status,
)
from minutiae.clock import Clock
from minutiae.errors import SourceUnavailable
from minutiae.model.topology import parse_cpulist


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            return fh.read(1 << 16).decode("utf-8", errors="replace")
    except OSError:
        return None


def _cpuset(cgroup_root: Path | None, cg: str | None) -> tuple[int, ...] | None:
    if cgroup_root is None or not cg:
        return None
    rel = cg.strip("/")
    if ".." in rel.split("/"):
        return None
    for name in ("cpuset.cpus.effective", "cpuset.effective_cpus"):
        text = _read(cgroup_root / rel / name) if rel else _read(cgroup_root / name)
        if text and text.strip():
            try:
                return parse_cpulist(text)
            except ValueError:
                return None
    return None


def read_processes(proc_root: str | Path = "/proc",
                   cgroup_root: str | Path | None = "/sys/fs/cgroup") -> dict[int, ProcInfo]:
    root = Path(proc_root)
    if not root.is_dir():
        raise SourceUnavailable("procs", f"{root}: no such directory")
    cg_root = Path(cgroup_root) if cgroup_root is not None and Path(cgroup_root).is_dir() else None
    out: dict[int, ProcInfo] = {}
    try:
        entries = [e for e in os.listdir(root) if e.isdigit()]
    except OSError as exc:
        raise SourceUnavailable("procs", f"{root}: {exc.strerror or exc}") from None
    for e in entries:
        d = root / e
        status_text = _read(d / "status")
        stat_text = _read(d / "stat")
        if status_text is None or stat_text is None:
            continue  # exited meanwhile, or not ours to read
        st = parse_status(status_text)
        stat = parse_stat(stat_text)
        if st.cpus_allowed is None or stat is None:
            continue
        cg = parse_cgroup(_read(d / "cgroup") or "")
        cpus = st.cpus_allowed
        eff = _cpuset(cg_root, cg)
        if eff is not None:
            cpus = tuple(sorted(set(cpus) & set(eff))) or cpus
        raw_cmd = _read(d / "cmdline") or ""
        pid = int(e)
        kernel = not raw_cmd and (st.ppid in (0, 2) or pid == 2)
        out[pid] = ProcInfo(pid=pid, name=st.name, ppid=st.ppid, cpus=cpus, ticks=stat.ticks,
                            last_cpu=stat.processor, cgroup=cg, kernel=kernel,
                            cmdline=raw_cmd.replace("\x00", " ").strip())
    return out


def sample_processes(clock: Clock, interval_s: float = 1.0, proc_root: str | Path = "/proc",
                     cgroup_root: str | Path | None = "/sys/fs/cgroup",
                     ) -> tuple[dict[int, ProcInfo], dict[int, float]]:
    """Read twice ``interval_s`` apart; returns the second read and each process's CPU share
    (CPU-seconds per second: 1.0 = one CPU fully busy) over the interval."""
    first = read_processes(proc_root, cgroup_root)
    t0 = clock.monotonic()
    clock.sleep(interval_s)
    second = read_processes(proc_root, cgroup_root)
    elapsed = max(clock.monotonic() - t0, 1e-9)
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    shares = {pid: max(p.ticks - first[pid].ticks, 0) / hz / elapsed
              for pid, p in second.items() if pid in first}
    return second, shares


def online_cpus(proc_root: str | Path = "/proc") -> tuple[int, ...]:
    """The CPUs init (pid 1) may use: the machine's CPUs as the process tree sees them."""
    text = _read(Path(proc_root) / "1" / "status")
    if text:
        st = parse_status(text)
        if st.cpus_allowed:
            return st.cpus_allowed
    return ()


def read_irqs(proc_root: str | Path = "/proc") -> list[Irq] | None:
    """The numbered IRQs with their affinity; ``None`` when ``interrupts`` cannot be read."""
    root = Path(proc_root)
    text = _read_all(root / "interrupts")
    if text is None:
        return None
    aff: dict[int, str] = {}
    irq_dir = root / "irq"
    try:
        names = [e for e in os.listdir(irq_dir) if e.isdigit()]
    except OSError:
        names = []
    for e in names:
        t = _read(irq_dir / e / "smp_affinity_list")
        if t is not None:
            aff[int(e)] = t.strip()
    return parse_interrupts(text, aff)


def _read_all(path: Path, cap: int = 1 << 24) -> str | None:
    """A whole /proc file (``interrupts`` is one line per IRQ: large on big hosts), capped."""
    try:
        with path.open("rb") as fh:
            return fh.read(cap).decode("utf-8", errors="replace")
    except OSError:
        return None

"""IRQs delivered to a job's CPUs, and whether irqbalance will move them back (pure).

An IRQ whose affinity includes job CPUs and that fired there steals those CPUs from the job
(NIC completion queues above all). ``irqbalance`` rewrites affinities every 10 s: moving an IRQ
by hand lasts only if irqbalance is stopped or told to keep off the job's CPUs
(``IRQBALANCE_BANNED_CPULIST=<cpus>`` in its environment file, irqbalance >= 1.8)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from minutiae.analyses.topology.parse.irq import Irq
from minutiae.analyses.topology.parse.proc_status import ProcInfo
from minutiae.model.topology import format_cpulist

__all__ = ["IrqOnJob", "IrqReport", "irq_report"]


@dataclass(frozen=True, slots=True)
class IrqOnJob:
    irq: int
    name: str
    overlap: tuple[int, ...]
    on_job: int  # interrupts counted on the job's CPUs since boot


@dataclass(frozen=True, slots=True)
class IrqReport:
    """``irqs``: IRQs that may land on the job's CPUs and did; ``irqbalance``: its PIDs
    (empty: not running); ``unreadable``: the interrupt table could not be read (UNKNOWN)."""

    irqs: tuple[IrqOnJob, ...]
    irqbalance: tuple[int, ...]
    unreadable: bool

    def advice(self, job_cpus: tuple[int, ...], free: tuple[int, ...]) -> list[str]:
        if not self.irqs or not free:
            return []
        cpus = format_cpulist(free)
        lines = [f"echo {cpus} > /proc/irq/{i.irq}/smp_affinity_list  # {i.name}" for i in self.irqs]
        if self.irqbalance:
            lines.append(f"# irqbalance (pid {','.join(map(str, self.irqbalance))}) will move them "
                         f"back: set IRQBALANCE_BANNED_CPULIST={format_cpulist(job_cpus)} in "
                         "/etc/default/irqbalance (or /etc/sysconfig/irqbalance) and restart it")
        return lines

    def to_json(self) -> dict[str, object]:
        return {"irqs": [{"irq": i.irq, "name": i.name, "overlap": list(i.overlap),
                          "on_job_cpus": i.on_job} for i in self.irqs],
                "irqbalance_pids": list(self.irqbalance),
                "irqbalance_running": bool(self.irqbalance) if not self.unreadable else None,
                "unreadable": self.unreadable}


def irq_report(irqs: list[Irq] | None, procs: Mapping[int, ProcInfo],
               job_cpus: tuple[int, ...]) -> IrqReport:
    jc = set(job_cpus)
    balance = tuple(sorted(p.pid for p in procs.values() if p.name == "irqbalance"))
    if irqs is None:
        return IrqReport((), balance, True)
    out = []
    for q in irqs:
        allowed = set(q.affinity) if q.affinity is not None else set(q.counts)
        overlap = tuple(sorted(allowed & jc))
        fired = sum(n for c, n in q.counts.items() if c in jc)
        if overlap and fired:
            out.append(IrqOnJob(q.irq, q.name, overlap, fired))
    out.sort(key=lambda i: (-i.on_job, i.irq))
    return IrqReport(tuple(out), balance, False)

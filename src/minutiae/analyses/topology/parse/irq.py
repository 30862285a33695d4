"""``/proc/interrupts`` and ``/proc/irq/<n>/smp_affinity_list`` text → IRQs (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from minutiae.model.topology import parse_cpulist

__all__ = ["Irq", "parse_interrupts"]


@dataclass(frozen=True, slots=True)
class Irq:
    """One numbered interrupt: ``counts`` per CPU (``/proc/interrupts`` columns), ``affinity``
    (CPUs it may be delivered to; ``None`` when unreadable), ``name`` (its device/queue, e.g.
    ``mlx5_comp3@pci:0000:1a:00.0``)."""

    irq: int
    name: str
    counts: dict[int, int]
    affinity: tuple[int, ...] | None


def parse_interrupts(text: str, affinity: dict[int, str]) -> list[Irq]:
    """Numbered IRQ lines of ``/proc/interrupts`` (``NMI``, ``LOC``… are per-CPU, not
    movable, and skipped), with each IRQ's affinity list text when read."""
    lines = text.splitlines()
    if not lines:
        return []
    cpus = [int(c[3:]) for c in lines[0].split() if c.startswith("CPU") and c[3:].isdigit()]
    out = []
    for ln in lines[1:]:
        head, sep, rest = ln.partition(":")
        if not sep or not head.strip().isdigit():
            continue
        toks = rest.split()
        counts = {}
        for cpu, tok in zip(cpus, toks, strict=False):
            if not tok.isdigit():
                break
            counts[cpu] = int(tok)
        desc = toks[len(counts):]
        aff: tuple[int, ...] | None = None
        n = int(head)
        if n in affinity:
            try:
                aff = parse_cpulist(affinity[n])
            except ValueError:
                aff = None
        out.append(Irq(n, desc[-1] if desc else "?", counts, aff))
    return out

"""Reads ``<proc_root>/uptime`` (the node's seconds since boot; the only I/O for it).

``proc_root`` is ``/proc`` on a live node, or a directory standing in for it (tests, captures).
The value feeds ``node.uptime_s`` in the counter rules (the boot grace of ``ib.port-down``).
"""

from __future__ import annotations

from pathlib import Path

from minutiae.errors import SourceUnavailable
from minutiae.node.sources.read_sysfs import read_small
from minutiae.node.sources.uptime.parse import parse_uptime

SOURCE = "uptime"


def read_uptime(proc_root: Path) -> float:
    """Seconds since boot from ``<proc_root>/uptime``. Raises ``SourceUnavailable`` naming the
    path when the file cannot be read or does not hold an uptime."""
    path = proc_root / "uptime"
    data = read_small(path, 256, SOURCE)
    value = parse_uptime(data)
    if value is None:
        raise SourceUnavailable(SOURCE, f"{path}: not an uptime ({data[:40]!r})")
    return value

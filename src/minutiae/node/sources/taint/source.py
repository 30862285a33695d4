"""The taint source: the kernel's taint flags (``<proc_root>/sys/kernel/tainted``) for the
``kernel`` check — a machine check or a kernel OOPS since boot. It reads the same procfs as the
uptime (``--proc-root``; ``/proc`` on this machine, none for a captured sysfs tree), and a tree
without the file (a capture of ``uptime`` only) has nothing to say."""

from __future__ import annotations

from minutiae.errors import SourceUnavailable
from minutiae.node.result import unknown
from minutiae.node.sources.base import Reading, Request, Source

GROUP = "kernel"


def _read(req: Request) -> Reading | None:
    root = req.cfg.uptime_root
    if root is None:
        return None
    from minutiae.node.sources.taint.read import read_taint, taint_path

    if not taint_path(root).exists():
        return None
    try:
        return Reading(read_taint(root))
    except SourceUnavailable as exc:
        return Reading(result=unknown(GROUP, exc.reason))


TAINT = Source("taint", GROUP, _read, components=(GROUP,))

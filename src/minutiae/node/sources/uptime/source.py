"""The uptime source: the node's seconds since boot (``<proc_root>/uptime``), a node fact the
counter rules read as ``node.uptime_s`` (the boot grace of ``ib.port-down``). An uptime that
cannot be read is a note and means no grace."""

from __future__ import annotations

from minutiae.errors import MinutiaeError
from minutiae.node.sources.base import Kind, Option, Reading, Request, Source
from minutiae.rules.counters.model import UPTIME


def _read(req: Request) -> Reading | None:
    root = req.cfg.uptime_root
    if root is None:
        return None
    from minutiae.node.sources.uptime.read import read_uptime

    try:
        return Reading(facts={UPTIME: read_uptime(root)})
    except MinutiaeError as exc:  # unknown uptime is no boot grace (never "healthy")
        return Reading(notes=(f"{exc}; no boot grace",))


UPTIME_SOURCE = Source("uptime", None, _read, components=("node",), options=(
    Option("--proc-root", "proc_root", Kind.PATH, check={
        "help": "Root of a procfs tree for uptime (boot grace of IB port rules); default /proc, "
                "but none with --sysfs-root (a capture is never judged by this machine's uptime)."},
        agent={"help": "uptime for boot graces (default: /proc when --sysfs-root is /sys)"}),))

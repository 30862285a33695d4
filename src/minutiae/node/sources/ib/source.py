"""The InfiniBand sources: an ``ibstat``/``ibstatus`` capture when one is given, else this node's
(or a captured) sysfs tree, ``<sysfs_root>/class/infiniband``."""

from __future__ import annotations

from minutiae.errors import MinutiaeError, SourceUnavailable
from minutiae.node.result import unknown
from minutiae.node.sources.base import Kind, Option, Reading, Request, Source

GROUP = "ib"


def _failed(exc: MinutiaeError) -> Reading:
    reason = exc.reason if isinstance(exc, SourceUnavailable) else str(exc)
    return Reading(result=unknown(GROUP, reason))


def _read_ibstat(req: Request) -> Reading | None:
    if req.cfg.ibstat is None:
        return None
    from minutiae.node.sources.ib.read_ibstat import read_ibstat_file

    try:
        return Reading(read_ibstat_file(req.cfg.ibstat))
    except MinutiaeError as exc:
        return _failed(exc)


def _read_sysfs(req: Request) -> Reading | None:
    from minutiae.node.sources.ib.read_sysfs import read_sysfs_ib

    try:
        return Reading(read_sysfs_ib(req.cfg.sysfs_root, req.now))
    except MinutiaeError as exc:
        return _failed(exc)


IBSTAT = Source("ibstat", GROUP, _read_ibstat, components=(GROUP,), options=(
    Option("--ibstat", "ibstat", Kind.PATH, capture=True, agent=None, check={
        "help": "ibstat or ibstatus capture instead of sysfs for the IB check."}),))

SYSFS_IB = Source("sysfs_ib", GROUP, _read_sysfs, components=(GROUP,), fallback=True)

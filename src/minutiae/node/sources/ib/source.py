"""The InfiniBand sources: an ``ibstat``/``ibstatus`` capture when one is given, else this node's
(or a captured) sysfs tree, ``<sysfs_root>/class/infiniband``.

No ``class/infiniband`` (or an empty one: no HCA, no driver) is UNKNOWN, unless the operator said
how many ports the node has (``--expected-ib-ports``): 0 makes it OK (an Ethernet-only node,
a cloud VM), more makes it the ``ib.port-count-expected`` finding with the reason."""

from __future__ import annotations

import os

from minutiae.errors import MinutiaeError, SourceUnavailable
from minutiae.model import CheckResult, Status
from minutiae.node.result import unknown
from minutiae.node.sources.base import Kind, Option, Reading, Request, Source
from minutiae.node.sources.ib.parse_sysfs import NODE_COMPONENT, no_ports

GROUP = "ib"
#: port rules judge ``ib:<dev>/<port>``; the port-count rule judges ``ib_node`` (the ib check)
COMPONENTS = (GROUP, NODE_COMPONENT)
#: the ib check of a node declared IB-less that has none
NONE_EXPECTED = "no InfiniBand expected (--expected-ib-ports 0) and none present"


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
    except SourceUnavailable as exc:  # no class/infiniband, or an empty one: no IB device
        return _no_device(exc, req.cfg.expected_ib_ports,
                          os.path.join(os.fspath(req.cfg.sysfs_root), "class", "infiniband"))
    except MinutiaeError as exc:
        return _failed(exc)


def _no_device(exc: SourceUnavailable, expected: int | None, where: str) -> Reading:
    """Unset: UNKNOWN with the reason (as ever); 0: OK; N > 0: no port counted (the count
    rule's finding) and the reason as a problem (never OK, also while the rule's timer runs)."""
    if expected is None:
        return _failed(exc)
    if expected == 0:
        return Reading(result=CheckResult(GROUP, Status.OK, (), NONE_EXPECTED, 0))
    return Reading(no_ports(where, exc.reason.removeprefix(where).strip(), expected))


IBSTAT = Source("ibstat", GROUP, _read_ibstat, components=COMPONENTS, options=(
    Option("--ibstat", "ibstat", Kind.PATH, capture=True, agent=None, check={
        "help": "ibstat or ibstatus capture instead of sysfs for the IB check."}),))

SYSFS_IB = Source("sysfs_ib", GROUP, _read_sysfs, components=COMPONENTS, fallback=True)

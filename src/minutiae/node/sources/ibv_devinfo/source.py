"""The ibv_devinfo source: IB/RoCE port state (and MTU, link layer) from an ``ibv_devinfo``
capture, judged by the ``ib.*`` counter rules like ibstat's."""

from __future__ import annotations

from pathlib import Path

from minutiae.errors import MinutiaeError
from minutiae.node.result import unknown
from minutiae.node.sources.base import Kind, Option, Reading, Request, Source
from minutiae.node.sources.ib.source import COMPONENTS, GROUP


def _read(req: Request) -> Reading | None:
    path = req.cfg.option("ibv_devinfo", "ibv_devinfo_file")
    if not path:
        return None
    from minutiae.node.sources.ibv_devinfo.read import read_ibv_devinfo

    try:
        return Reading(read_ibv_devinfo(Path(path)))
    except MinutiaeError as exc:
        return Reading(result=unknown(GROUP, str(exc)))


IBV_DEVINFO = Source("ibv_devinfo", GROUP, _read, components=COMPONENTS, options=(
    Option("--ibv-devinfo", "ibv_devinfo_file", Kind.PATH, capture=True, agent=None, check={
        "help": "ibv_devinfo [-v] capture: IB/RoCE port state, MTU and link layer."}),))

"""The DCGM source: a dcgm-exporter ``/metrics`` URL or a capture of it, for the gpu check."""

from __future__ import annotations

from minutiae.errors import MinutiaeError
from minutiae.node.sources import gpu
from minutiae.node.sources.base import Kind, Option, Reading, Request, Source


def _read(req: Request) -> Reading | None:
    if req.cfg.dcgm is None:
        return None
    from minutiae.node.sources.dcgm.read import read_dcgm

    try:
        return Reading(read_dcgm(req.cfg.dcgm))
    except MinutiaeError as exc:
        return gpu.unreadable(exc)


DCGM = Source("dcgm", gpu.GROUP, _read, components=gpu.COMPONENTS, options=(
    Option("--dcgm", "dcgm", Kind.TEXT, capture=True,
           check={"metavar": "URL|FILE", "help": "dcgm-exporter /metrics URL or capture."},
           agent={"help": "dcgm-exporter URL or file"}),))

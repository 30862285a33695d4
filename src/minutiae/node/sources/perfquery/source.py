"""The perfquery source: IB port counters from a ``perfquery -x`` / ``perfquery -e -x``
capture, judged by the ``ib.*`` counter rules (rates across runs with ``--state-file``)."""

from __future__ import annotations

from pathlib import Path

from minutiae.errors import MinutiaeError
from minutiae.node.result import unknown
from minutiae.node.sources.base import Kind, Option, Reading, Request, Source

GROUP = "ib"


def _read(req: Request) -> Reading | None:
    path = req.cfg.option("perfquery", "perfquery_file")
    if not path:
        return None
    from minutiae.node.sources.perfquery.read import read_perfquery

    try:
        return Reading(read_perfquery(Path(path)))
    except MinutiaeError as exc:
        return Reading(result=unknown(GROUP, str(exc)))


PERFQUERY = Source("perfquery", GROUP, _read, components=(GROUP,), options=(
    Option("--perfquery", "perfquery_file", Kind.PATH, capture=True, agent=None, check={
        "help": "perfquery -x (or -e -x) capture: IB port error counters."}),))

"""Auto-detect a topology capture's format and parse it (pure).

Formats: ``nvidia-smi topo -m`` text, NCCL topology XML (``<system>``), hwloc XML
(``<topology>``), and minutiae's own JSON (``minutiae topo --json``; what ``--learn`` reads
besides the three captures).
"""

from __future__ import annotations

import json
import re
from enum import Enum

from minutiae.analyses.topology.parse.hwloc import parse_hwloc_xml
from minutiae.analyses.topology.parse.matrix import looks_like_topo_matrix, parse_topo_matrix
from minutiae.analyses.topology.parse.nccl import parse_nccl_topo
from minutiae.errors import ParseError
from minutiae.model.topology import NodeTopology, PathType

_ROOT = re.compile(rb"<\s*([A-Za-z_][\w.-]*)")


class TopoFormat(Enum):
    NVIDIA_SMI = "nvidia-smi-topo"
    NCCL_XML = "nccl-topo-xml"
    HWLOC_XML = "hwloc-xml"
    JSON = "minutiae-json"


def detect_format(data: bytes, where: str | None = None) -> TopoFormat:
    head = data[:65536].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"{"):
        return TopoFormat.JSON
    if head.startswith(b"<"):
        # skip the prolog, comments and doctype to find the root element
        body = re.sub(rb"<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>]*>", b"", head, flags=re.S)
        m = _ROOT.search(body)
        root = m.group(1).decode() if m else ""
        if root == "topology":
            return TopoFormat.HWLOC_XML
        if root in ("system", "graphs"):
            return TopoFormat.NCCL_XML
        raise ParseError(f"XML with root element <{root or '?'}> is neither an NCCL topology "
                         "(<system>) nor an hwloc topology (<topology>)", where)
    text = head.decode("utf-8", errors="replace")
    if looks_like_topo_matrix(text):
        return TopoFormat.NVIDIA_SMI
    raise ParseError("unknown topology format (expected nvidia-smi topo -m output, NCCL "
                     "topology XML, hwloc XML or minutiae topo --json)", where)


def parse_topology(data: bytes, where: str | None = None) -> NodeTopology:
    fmt = detect_format(data, where)
    if fmt is TopoFormat.HWLOC_XML:
        return parse_hwloc_xml(data, where)
    if fmt is TopoFormat.NCCL_XML:
        return parse_nccl_topo(data, where)
    if fmt is TopoFormat.JSON:
        from minutiae.analyses.topology.parse.topo_json import topology_from_json

        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(f"not valid JSON ({exc})", where) from None
        return topology_from_json(obj, where)
    return parse_topo_matrix(data.decode("utf-8", errors="replace"), where)


def merge_matrix(base: NodeTopology, matrix: NodeTopology) -> NodeTopology:
    """Add what ``nvidia-smi topo -m`` knows and sysfs does not (NVLink peers; GPU↔NIC path
    types where sysfs could not place a NIC) to a sysfs topology, GPU by index."""
    from dataclasses import replace

    by_idx = {g.index: g for g in matrix.gpus}
    gpus = tuple(replace(g, nvlinks=by_idx[g.index].nvlinks) if g.index in by_idx else g
                 for g in base.gpus)
    gpu_nic = dict(base.gpu_nic)
    for key, path in matrix.gpu_nic.items():
        if gpu_nic.get(key) in (None, PathType.UNKNOWN) and base.nic(key[1]) is not None:
            gpu_nic[key] = path
    missing = tuple(m for m in base.missing if not m.startswith("NVLink peers"))
    return replace(base, gpus=gpus, gpu_nic=gpu_nic, missing=missing,
                   source=f"{base.source}+nvidia-smi-topo")

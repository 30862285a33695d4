"""Where each GPU sits: nearest NICs, NUMA placement, nearest NVMe (pure).

``place_gpus`` is what the ``minutiae topo`` table and ``--json`` show and what the binding plan
and the checks build on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minutiae.model.topology import Gpu, NodeTopology, PathType
from minutiae.parsers.topology_json import topology_to_json


@dataclass(frozen=True, slots=True)
class GpuPlacement:
    """One GPU's neighbourhood.

    ``nearest_nics``: the NICs with the best path type from this GPU (ties kept, in name
    order); ``nic_path``: that path type (``UNKNOWN`` when the source has no NIC or no path);
    ``gdr_local``: the path is PXB or better, i.e. GPUDirect RDMA stays below the CPU (NCCL's
    default ``NCCL_NET_GDR_LEVEL``). ``numa``/``cpus``: the GPU's NUMA node and local CPUs (the
    GPU's own affinity, else its NUMA node's CPU list). ``nearest_nvme``/``nvme_path`` likewise
    for NVMe drives (what GPUDirect Storage should read from).
    """

    gpu: Gpu
    numa: int | None
    cpus: tuple[int, ...]
    nearest_nics: tuple[str, ...]
    nic_path: PathType
    nearest_nvme: tuple[str, ...]
    nvme_path: PathType

    @property
    def gdr_local(self) -> bool:
        return bool(self.nearest_nics) and self.nic_path.gdr_local


def _numa_path(a: int | None, b: int | None) -> PathType:
    if a is None or b is None:
        return PathType.UNKNOWN
    return PathType.NODE if a == b else PathType.SYS


def _best(candidates: list[tuple[PathType, str]]) -> tuple[tuple[str, ...], PathType]:
    known = [(p, n) for p, n in candidates if p is not PathType.UNKNOWN]
    if not known:
        return (), PathType.UNKNOWN
    best = min(p.rank for p, _ in known)
    path = next(p for p, _ in known if p.rank == best)
    return tuple(sorted(n for p, n in known if p.rank == best)), path


def place_gpus(t: NodeTopology) -> tuple[GpuPlacement, ...]:
    out = []
    for g in t.gpus:
        cand = []
        for n in t.nics:
            p = t.gpu_nic.get((g.index, n.name))
            if p is None or p is PathType.UNKNOWN:
                p = _numa_path(g.numa, n.numa)
            cand.append((p, n.name))
        nics, nic_path = _best(cand)
        vcand = []
        for d in t.nvmes:
            p = t.gpu_nvme.get((g.index, d.name))
            if p is None or p is PathType.UNKNOWN:
                p = _numa_path(g.numa, d.numa)
            vcand.append((p, d.name))
        nvme, nvme_path = _best(vcand)
        cpus = g.cpus or (t.numa_cpus.get(g.numa, ()) if g.numa is not None else ())
        out.append(GpuPlacement(g, g.numa, cpus, nics, nic_path, nvme, nvme_path))
    return tuple(out)


def report(t: NodeTopology) -> dict[str, Any]:
    """The ``minutiae topo --json`` object: the topology plus, per GPU, ``nearest_nics``,
    ``nearest_nic_path``, ``gdr_local``, ``nearest_nvme``, ``nearest_nvme_path`` (and ``cpus``
    filled from the NUMA node when the GPU's own affinity is unknown)."""
    obj = topology_to_json(t)
    for gj, pl in zip(obj["gpus"], place_gpus(t), strict=True):
        gj["cpus"] = list(pl.cpus)
        gj["nearest_nics"] = list(pl.nearest_nics)
        gj["nearest_nic_path"] = pl.nic_path.value if pl.nearest_nics else None
        gj["gdr_local"] = pl.gdr_local
        gj["nearest_nvme"] = list(pl.nearest_nvme)
        gj["nearest_nvme_path"] = pl.nvme_path.value if pl.nearest_nvme else None
    return obj

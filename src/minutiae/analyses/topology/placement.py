"""Where each GPU sits: nearest NICs, NUMA placement, nearest NVMe (pure).

``place_gpus`` is what the ``minutiae topo`` table and ``--json`` show and what the binding plan
and the checks build on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from minutiae.analyses.topology.parse.topo_json import topology_to_json
from minutiae.model.topology import Gpu, NodeTopology, PathType, is_rdma


@dataclass(frozen=True, slots=True)
class GpuPlacement:
    """One GPU's neighbourhood.

    ``nearest_nics``: the RDMA-capable NICs (``is_rdma``: a plain network interface such as
    an ENA is not one) with the best path type from this GPU (ties kept, in name order); ``nic_path``: that path type (``UNKNOWN`` when the source has no NIC or no path);
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


_UNKNOWN = PathType.UNKNOWN
_RANKS = {p: p.rank for p in PathType}


def _numa_path(a: int | None, b: int | None) -> PathType:
    if a is None or b is None:
        return _UNKNOWN
    return PathType.NODE if a == b else PathType.SYS


def _best(gpu: Gpu, devices: list[tuple[str, int | None]],
          paths: Mapping[tuple[int, str], PathType]) -> tuple[tuple[str, ...], PathType]:
    """The devices with the best known path from ``gpu`` (falling back to NUMA placement when
    the source has no path), and that path type."""
    best_rank, best_path, names = 99, _UNKNOWN, []
    for name, numa in devices:
        p = paths.get((gpu.index, name))
        if p is None or p is _UNKNOWN:
            p = _numa_path(gpu.numa, numa)
            if p is _UNKNOWN:
                continue
        r = _RANKS[p]
        if r < best_rank:
            best_rank, best_path, names = r, p, [name]
        elif r == best_rank:
            names.append(name)
    return tuple(sorted(names)), best_path


def nearest(t: NodeTopology, gpu: Gpu, names: set[str]) -> tuple[tuple[str, ...], PathType]:
    """The NICs among ``names`` with the best path from ``gpu``, and that path type."""
    return _best(gpu, [(n.name, n.numa) for n in t.nics if n.name in names], t.gpu_nic)


def place_gpus(t: NodeTopology) -> tuple[GpuPlacement, ...]:
    nics = [(n.name, n.numa) for n in t.nics if is_rdma(n)]
    nvmes = [(d.name, d.numa) for d in t.nvmes]
    out = []
    for g in t.gpus:
        nic_names, nic_path = _best(g, nics, t.gpu_nic)
        nvme, nvme_path = _best(g, nvmes, t.gpu_nvme)
        cpus = g.cpus or (t.numa_cpus.get(g.numa, ()) if g.numa is not None else ())
        out.append(GpuPlacement(g, g.numa, cpus, nic_names, nic_path, nvme, nvme_path))
    return tuple(out)


def report(t: NodeTopology) -> dict[str, Any]:
    """The ``minutiae topo --json`` object: the topology plus, per GPU, ``nearest_nics``,
    ``nearest_nic_path``, ``gdr_local``, ``nearest_nvme``, ``nearest_nvme_path`` (and ``cpus``
    filled from the NUMA node when the GPU's own affinity is unknown)."""
    obj = topology_to_json(t)
    for gj, pl in zip(obj["gpus"], place_gpus(t), strict=True):
        gj["cpus"] = list(pl.cpus) if pl.cpus else None  # unknown, not "none"
        gj["nearest_nics"] = list(pl.nearest_nics)
        gj["nearest_nic_path"] = pl.nic_path.value if pl.nearest_nics else None
        gj["gdr_local"] = pl.gdr_local
        gj["nearest_nvme"] = list(pl.nearest_nvme)
        gj["nearest_nvme_path"] = pl.nvme_path.value if pl.nearest_nvme else None
    return obj

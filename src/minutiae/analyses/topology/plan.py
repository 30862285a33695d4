"""The binding plan for N local ranks on one node (pure): which GPU, which CPUs, which memory
node, which NIC(s) and which NVMe each local rank should use.

Rules:

* ranks take GPUs in index order (``CUDA_VISIBLE_DEVICES`` lists them in rank order, so local
  rank *r* uses ``cuda:r``); more ranks than GPUs is an error;
* each rank's CPUs are its GPU's NUMA-local CPUs minus the reserved ones, split evenly and
  disjointly among the ranks that share them. When the CPU list is several equal runs (Linux
  numbers the hyper-thread siblings of cores 0-51 as 104-155), every rank gets the same slice
  of each run, so siblings stay together;
* memory is bound to the GPU's NUMA node when known;
* NICs: the GPU's nearest NICs when the path is PXB or better (GPUDirect RDMA stays below the
  CPU); otherwise the nearest ones with a warning (``gpu_without_local_nic``);
* default reserved CPUs: the first CPU of every NUMA node and its hyper-thread sibling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from minutiae.analyses.topology.placement import GpuPlacement, place_gpus
from minutiae.errors import ConfigError
from minutiae.model.topology import NodeTopology, PathType, format_cpulist

_PCI_NAME = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True, slots=True)
class RankBinding:
    """One local rank: ``gpu`` index, ``cpus`` to pin to, ``mems`` (NUMA nodes to bind memory
    to; empty when unknown), ``nics`` (RDMA devices for NCCL/UCX; empty when the source names
    none), ``nic_path`` (path type GPU→NIC), ``nvme`` (nearest drive for GPUDirect Storage)."""

    local_rank: int
    gpu: int
    cpus: tuple[int, ...]
    mems: tuple[int, ...]
    nics: tuple[str, ...]
    nic_path: PathType
    nvme: str | None


@dataclass(frozen=True, slots=True)
class BindingPlan:
    """The plan; ``reserved`` CPUs are left to system services (see the systemd drop-in);
    ``warnings`` say what the plan could not do well (and why)."""

    ranks: tuple[RankBinding, ...]
    reserved: tuple[int, ...]
    all_cpus: tuple[int, ...]
    warnings: tuple[str, ...]

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(r.gpu for r in self.ranks)


def _runs(cpus: tuple[int, ...]) -> list[list[int]]:
    runs: list[list[int]] = []
    for c in cpus:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


def split_cpus(cpus: tuple[int, ...], parts: int) -> list[tuple[int, ...]]:
    """Split a CPU list into ``parts`` disjoint, near-equal slices (sibling runs kept aligned)."""
    if parts <= 0:
        return []
    runs = _runs(tuple(sorted(cpus)))
    aligned = len(runs) > 1 and len({len(r) for r in runs}) == 1
    sources = runs if aligned else [sorted(cpus)]
    out: list[list[int]] = [[] for _ in range(parts)]
    for run in sources:
        n = len(run)
        for i in range(parts):
            lo, hi = n * i // parts, n * (i + 1) // parts
            out[i].extend(run[lo:hi])
    return [tuple(sorted(x)) for x in out]


def default_reserved(t: NodeTopology) -> tuple[int, ...]:
    """The first CPU of each NUMA node plus its sibling in the next equal run, if any."""
    sets = dict(t.numa_cpus)
    if not sets:
        for g in t.gpus:
            if g.cpus:
                sets.setdefault(g.numa if g.numa is not None else -1, g.cpus)
    out: set[int] = set()
    for cpus in sets.values():
        runs = _runs(tuple(sorted(cpus)))
        if not runs:
            continue
        out.add(runs[0][0])
        if len(runs) > 1 and len({len(r) for r in runs}) == 1:
            out.add(runs[1][0])
    return tuple(sorted(out))


def make_plan(t: NodeTopology, ranks: int | None = None,
              reserved: tuple[int, ...] | None = None) -> BindingPlan:
    placements = place_gpus(t)
    if not placements:
        raise ConfigError(f"{t.where or t.source}: no GPU in this topology, nothing to bind")
    n = len(placements) if ranks is None else ranks
    if n < 1:
        raise ConfigError(f"--ranks must be at least 1 (got {n})")
    if n > len(placements):
        raise ConfigError(f"--ranks {n} is more than the {len(placements)} GPU(s) of this node")
    res = default_reserved(t) if reserved is None else tuple(sorted(set(reserved)))
    warnings: list[str] = []
    chosen: list[GpuPlacement] = list(placements[:n])
    # group ranks sharing the same local CPU set, split it among them
    groups: dict[tuple[int, ...], list[int]] = {}
    for r, pl in enumerate(chosen):
        groups.setdefault(pl.cpus, []).append(r)
    cpus_of: dict[int, tuple[int, ...]] = {}
    for cpus, members in groups.items():
        free = tuple(c for c in cpus if c not in set(res))
        if cpus and not free:
            warnings.append(f"all local CPUs of GPU(s) {', '.join(str(chosen[r].gpu.index) for r in members)} "
                            "are reserved; leaving them unpinned")
        if not cpus:
            warnings.append(f"CPU affinity of GPU(s) {', '.join(str(chosen[r].gpu.index) for r in members)} "
                            "is unknown; leaving them unpinned")
        slices = split_cpus(free, len(members)) if free else [()] * len(members)
        if free and len(free) < len(members):
            warnings.append(f"{len(members)} ranks share {len(free)} free CPU(s): some ranks get none")
        for r, sl in zip(members, slices, strict=True):
            cpus_of[r] = sl
    out = []
    for r, pl in enumerate(chosen):
        named = tuple(x for x in pl.nearest_nics if not _PCI_NAME.match(x))
        if pl.nearest_nics and not named:
            warnings.append(f"GPU{pl.gpu.index}: nearest NIC(s) {', '.join(pl.nearest_nics)} have no "
                            "RDMA device name in this source; NCCL_IB_HCA left out")
        if pl.nearest_nics and not pl.gdr_local:
            warnings.append(f"GPU{pl.gpu.index}: no NIC within PXB (nearest {', '.join(pl.nearest_nics)} "
                            f"via {pl.nic_path.value}); GPUDirect RDMA will cross the CPU")
        out.append(RankBinding(
            local_rank=r, gpu=pl.gpu.index, cpus=cpus_of.get(r, ()),
            mems=(pl.numa,) if pl.numa is not None else (), nics=named, nic_path=pl.nic_path,
            nvme=pl.nearest_nvme[0] if pl.nearest_nvme else None,
        ))
    all_cpus = tuple(sorted({c for cpus in t.numa_cpus.values() for c in cpus}
                            | {c for g in t.gpus for c in g.cpus}))
    if res and all_cpus and not set(res) <= set(all_cpus):
        warnings.append(f"reserved CPUs {format_cpulist(set(res) - set(all_cpus))} are not on this node")
    return BindingPlan(ranks=tuple(out), reserved=res, all_cpus=all_cpus, warnings=tuple(warnings))

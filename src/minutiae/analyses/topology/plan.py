"""The binding plan for N local ranks on one node (pure): one object that every output format
(``render``) is produced from, so that the formats cannot disagree.

Rules:

* ranks take GPUs in index order; every rank sees the same ``CUDA_VISIBLE_DEVICES`` (the plan's
  GPUs in rank order) with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so local rank *r* uses ``cuda:r``
  whatever the launcher; more ranks than GPUs is an error;
* each rank's CPUs are its GPU's NUMA-local CPUs minus the reserved ones, split evenly and
  disjointly among the ranks that share them (hyper-thread sibling runs kept aligned). More
  ranks than free CPUs: those ranks share the whole free set (with a warning). A GPU whose CPUs
  the source does not give: its rank's CPUs are unknown (``None``) and it is left unpinned;
* memory is bound to the GPU's NUMA node when known;
* network, by transport (``Transport``): InfiniBand/RoCE verbs get ``NCCL_IB_HCA`` (exact names,
  ``=`` prefix) and ``UCX_NET_DEVICES`` (``name:port``) listing only NICs within PXB of a
  planned GPU (NCCL's GPUDirect-RDMA default), one list for the whole job: NCCL picks each GPU's
  nearest NIC from it itself and keeps PXN / cross-rail paths. ``per_rank_nics`` gives each
  rank only its own nearest NIC(s) instead (stricter rail pinning, but NCCL can no longer route
  through a peer GPU's NIC: PXN and cross-rail traffic are disabled). EFA: ``FI_PROVIDER=efa``
  and ``FI_EFA_USE_DEVICE_RDMA=1`` for aws-ofi-nccl, which chooses the NICs per GPU itself; no
  IB variables. TCP: ``NCCL_IB_DISABLE=1`` and ``NCCL_SOCKET_IFNAME`` when the source names the
  interface. Device names come only from a source that names devices; otherwise the variable
  is left out with a warning. A transport the source cannot tell is not guessed;
* default reserved CPUs: the first CPU of every NUMA node and its hyper-thread sibling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from minutiae.analyses.topology.placement import GpuPlacement, nearest, place_gpus
from minutiae.errors import ConfigError
from minutiae.model.topology import Nic, NicKind, NodeTopology, PathType, format_cpulist, is_rdma

_PCI_NAME = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


class Transport(Enum):
    """How NCCL/UCX reach other nodes. ``IB``: verbs over InfiniBand or RoCE; ``EFA``: libfabric
    through aws-ofi-nccl; ``TCP``: sockets; ``UNKNOWN``: the source does not say."""

    IB = "ib"
    EFA = "efa"
    TCP = "tcp"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class RankBinding:
    """One local rank: ``gpu`` index, ``cpus`` to pin to (``None``: unknown, left unpinned),
    ``mems`` (NUMA nodes to bind memory to; empty when unknown), ``nics`` (this rank's nearest
    named NICs within PXB), ``nic_path`` (path type GPU→nearest NIC), ``nvme`` (nearest drive
    for GPUDirect Storage), ``env`` (this rank's own variables, besides the plan's)."""

    local_rank: int
    gpu: int
    cpus: tuple[int, ...] | None
    mems: tuple[int, ...]
    nics: tuple[str, ...]
    nic_path: PathType
    nvme: str | None
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class BindingPlan:
    """The plan; ``env``: variables every rank gets; ``reserved`` CPUs are left to system
    services (see the systemd output); ``warnings`` say what the plan could not do and why;
    ``notes`` what a variable is for or what the source's view may miss."""

    ranks: tuple[RankBinding, ...]
    reserved: tuple[int, ...]
    all_cpus: tuple[int, ...]
    transport: Transport
    env: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(r.gpu for r in self.ranks)

    def rank_env(self, r: RankBinding) -> dict[str, str]:
        """Every variable rank ``r`` runs with (the plan's, then its own)."""
        return {"LOCAL_RANK": str(r.local_rank), **dict(self.env), **dict(r.env)}

    def to_json(self) -> dict[str, object]:
        return {"transport": self.transport.value, "reserved": list(self.reserved),
                "env": dict(self.env), "warnings": list(self.warnings), "notes": list(self.notes),
                "ranks": [{"local_rank": r.local_rank, "gpu": r.gpu, "cuda_device": r.local_rank,
                           "cpus": None if r.cpus is None else list(r.cpus), "mems": list(r.mems),
                           "nics": list(r.nics), "nic_path": r.nic_path.value, "nvme": r.nvme,
                           "env": dict(r.env)} for r in self.ranks]}


def _runs(cpus: tuple[int, ...]) -> list[list[int]]:
    runs: list[list[int]] = []
    for c in cpus:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


def _sibling_runs(runs: list[list[int]]) -> bool:
    """Runs that look like hyper-thread sibling blocks (``0-51,104-155``): several runs of one
    length above 1. Interleaved numbering (NUMA 0 = the even CPUs) has runs of one CPU: no
    sibling is told by the numbering there."""
    return len(runs) > 1 and len({len(r) for r in runs}) == 1 and len(runs[0]) > 1


def split_cpus(cpus: tuple[int, ...], parts: int) -> list[tuple[int, ...]]:
    """Split a CPU list into ``parts`` disjoint, near-equal slices, none empty when there are
    at least ``parts`` CPUs (sibling runs kept aligned when each run has a CPU for every part)."""
    if parts <= 0:
        return []
    runs = _runs(tuple(sorted(cpus)))
    aligned = _sibling_runs(runs) and len(runs[0]) >= parts
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
        if _sibling_runs(runs):
            out.add(runs[1][0])
    return tuple(sorted(out))


def _cpus(chosen: list[GpuPlacement], res: tuple[int, ...],
          warnings: list[str]) -> dict[int, tuple[int, ...] | None]:
    """Each rank's CPUs: its GPU's local CPUs less the reserved ones, split among the ranks that
    share them; shared whole when there are fewer free CPUs than ranks; None when unknown."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for r, pl in enumerate(chosen):
        groups.setdefault(pl.cpus, []).append(r)
    out: dict[int, tuple[int, ...] | None] = {}
    for cpus, members in groups.items():
        gpus = ", ".join(str(chosen[r].gpu.index) for r in members)
        free = tuple(c for c in cpus if c not in set(res))
        if not cpus:
            warnings.append(f"CPU affinity of GPU(s) {gpus} is unknown in this source; leaving "
                            "their rank(s) unpinned (CPUs null)")
        elif not free:
            warnings.append(f"all local CPUs of GPU(s) {gpus} are reserved; leaving their rank(s) "
                            "unpinned (CPUs null)")
        if not free:
            out.update({r: None for r in members})
        elif len(free) < len(members):
            warnings.append(f"{len(members)} ranks on GPU(s) {gpus} share {len(free)} free CPU(s) "
                            f"({format_cpulist(free)}): each is pinned to all of them")
            out.update({r: free for r in members})
        else:
            out.update(zip(members, split_cpus(free, len(members)), strict=True))
    return out


def _kind_transport(nics: list[Nic]) -> Transport:
    kinds = {n.kind for n in nics}
    if not nics:
        return Transport.UNKNOWN
    if NicKind.EFA in kinds and kinds <= {NicKind.EFA}:
        return Transport.EFA
    rdma = all(n.kind is NicKind.INFINIBAND or (n.kind is NicKind.ETHERNET and n.name != n.netdev)
               for n in nics)
    return Transport.IB if rdma else Transport.UNKNOWN


#: the NIC kinds each transport can use (UNKNOWN: the source does not say, the user chose)
_FITS = {Transport.EFA: {NicKind.EFA, NicKind.UNKNOWN},
         Transport.IB: {NicKind.INFINIBAND, NicKind.ETHERNET, NicKind.UNKNOWN}}


def _fits(n: Nic, tr: Transport) -> bool:
    return is_rdma(n) and n.kind in _FITS.get(tr, set(NicKind))


def _local_nics(gpu: int, near: tuple[tuple[str, ...], PathType], t: NodeTopology,
                warnings: list[str], unnamed: list[str]) -> tuple[str, ...]:
    """The GPU's nearest NICs within PXB that have a device name (never a PCI id or a column
    label); warnings say why a GPU has none."""
    names, path = near
    if not names:
        return ()
    if not path.gdr_local:
        warnings.append(f"GPU{gpu}: no NIC within PXB (nearest {', '.join(names)} via {path.value}); "
                        "GPUDirect RDMA would cross the CPU, so no NIC of this GPU is listed for NCCL")
        return ()
    named = tuple(x for x in names if not _PCI_NAME.match(x) and not _label(x, t))
    if not named:  # said only when the transport needs names (IB/RoCE; aws-ofi-nccl does not)
        unnamed.append(f"GPU{gpu}: nearest NIC(s) {', '.join(names)} have no RDMA device name in "
                       "this source; NCCL_IB_HCA/UCX_NET_DEVICES left out")
    return named


def _label(name: str, t: NodeTopology) -> bool:
    """A ``NIC#`` column label of a matrix without its legend: not a device name."""
    return t.source.startswith("nvidia-smi") and re.fullmatch(r"NIC\d+", name) is not None


def _transport(t: NodeTopology, local: list[Nic], forced: Transport | None,
               warnings: list[str]) -> Transport:
    """The transport given, else the one the planned GPUs' nearest NICs' stated kinds tell."""
    if forced is not None:
        return forced
    tr = _kind_transport(local or [n for n in t.nics if is_rdma(n)])
    if tr is Transport.UNKNOWN and t.nics:
        kinds = sorted({n.kind.value for n in (local or t.nics)})
        warnings.append(f"the NICs' transport is not in this source (kind {', '.join(kinds)}): "
                        "no network variable set; give --transport ib|efa|tcp")
    elif tr is Transport.UNKNOWN:
        warnings.append("no NIC in this source: no network variable set "
                        "(give --transport ib|efa|tcp to set one)")
    return tr


#: what the EFA variables are for (aws-ofi-nccl doc/efa-env-var.md, "EFA Cheatsheet")
EFA_NOTE = ("EFA: FI_PROVIDER=efa is needed with aws-ofi-nccl <= 1.5 and FI_EFA_USE_DEVICE_RDMA=1 "
            "with aws-ofi-nccl < 1.7 (libfabric < 1.18) on instances with GPUDirect RDMA (p4, p5); "
            "later versions need neither and both are harmless there (aws-ofi-nccl "
            "doc/efa-env-var.md). aws-ofi-nccl picks each GPU's EFA devices itself; NCCL_PROTO="
            "simple (aws-ofi-nccl <= 1.5 only) is not set")


def _efa_env(t: NodeTopology, near: list[tuple[tuple[str, ...], PathType]],
             warnings: list[str]) -> list[tuple[str, str]]:
    """``FI_PROVIDER=efa``, and ``FI_EFA_USE_DEVICE_RDMA=1`` only when every planned GPU has an
    EFA device within PXB that the source does not say lacks GPUDirect RDMA (set on an EFA
    without it, libfabric is told to use what the device cannot do)."""
    nics = {n.name: n for n in t.nics}
    gdr = all(path.gdr_local and names and all(nics[x].gdr is not False for x in names)
              for names, path in near)
    if not gdr:
        warnings.append("EFA: not every planned GPU has an EFA device within PXB with GPUDirect "
                        "RDMA in this source; FI_EFA_USE_DEVICE_RDMA left out")
    return [("FI_PROVIDER", "efa")] + ([("FI_EFA_USE_DEVICE_RDMA", "1")] if gdr else [])


def _net_env(t: NodeTopology, tr: Transport, nics: tuple[str, ...],
             warnings: list[str]) -> list[tuple[str, str]]:
    if tr is Transport.TCP:
        ifs = sorted({n.netdev for n in t.nics if n.netdev})
        if not ifs:
            warnings.append("TCP: this source names no network interface; NCCL_SOCKET_IFNAME "
                            "left out (NCCL picks one)")
        return [("NCCL_IB_DISABLE", "1")] + ([("NCCL_SOCKET_IFNAME", "=" + ",".join(ifs))] if ifs else [])
    if tr is Transport.IB and nics:
        ports = {n.name: n.port or 1 for n in t.nics}
        return [("NCCL_IB_HCA", "=" + ",".join(nics)),
                ("UCX_NET_DEVICES", ",".join(f"{n}:{ports.get(n, 1)}" for n in nics))]
    return []


#: the CPU caveat of a static NCCL topology file
NCCL_FILE_NOTE = ("CPU and NUMA placement from an NCCL topology file: a file shipped for an "
                  "instance type gives NCCL's view, which need not be the machine's (aws-ofi-nccl's "
                  "p5.48xl file puts all eight GPUs under one CPU, affinity 0-47, on a two-socket "
                  "instance); for CPU and memory binding plan from the node (sysfs) or from an "
                  "NCCL_TOPO_DUMP_FILE written on it")


def _network(t: NodeTopology, chosen: list[GpuPlacement], transport: Transport | None,
             per_rank_nics: bool, warnings: list[str]
             ) -> tuple[Transport, list[PathType], list[tuple[str, ...]], list[tuple[str, str]],
                        list[tuple[tuple[str, str], ...]]]:
    """(transport, each rank's path to its NIC, each rank's NICs, the job's network variables,
    each rank's own ones). Each GPU's NICs are its nearest ones among those the transport can
    use (an EFA device is no InfiniBand HCA, nor the reverse)."""
    local = [n for pl in chosen if pl.gdr_local for x in pl.nearest_nics if (n := t.nic(x)) is not None]
    tr = _transport(t, local, transport, warnings)
    allowed = {n.name for n in t.nics if _fits(n, tr)}
    near = [nearest(t, pl.gpu, allowed) for pl in chosen]
    unnamed: list[str] = []
    quiet: list[str] = []  # TCP does not go through these NICs: nothing to warn about
    nics_of = [_local_nics(pl.gpu.index, nr, t, quiet if tr is Transport.TCP else warnings, unnamed)
               for pl, nr in zip(chosen, near, strict=True)]
    if tr is Transport.IB:
        warnings += unnamed
    union = tuple(sorted({x for ns in nics_of for x in ns}))
    env: list[tuple[str, str]] = []
    own: list[tuple[tuple[str, str], ...]] = [() for _ in chosen]
    if tr is Transport.EFA:
        env = _efa_env(t, near, warnings)
    elif per_rank_nics and tr is Transport.IB:
        own = [tuple(_net_env(t, tr, ns, [])) for ns in nics_of]
    else:
        env = _net_env(t, tr, union, warnings)
    return tr, [path for _, path in near], nics_of, env, own


def make_plan(t: NodeTopology, ranks: int | None = None, reserved: tuple[int, ...] | None = None,
              transport: Transport | None = None, per_rank_nics: bool = False) -> BindingPlan:
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
    chosen = list(placements[:n])
    cpus_of = _cpus(chosen, res, warnings)
    tr, paths, nics_of, net, own = _network(t, chosen, transport, per_rank_nics, warnings)
    gpus = ",".join(str(pl.gpu.index) for pl in chosen)
    env = [("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("CUDA_VISIBLE_DEVICES", gpus), *net]
    out = tuple(RankBinding(
        local_rank=r, gpu=pl.gpu.index, cpus=cpus_of[r],
        mems=(pl.numa,) if pl.numa is not None else (), nics=nics_of[r], nic_path=paths[r],
        nvme=pl.nearest_nvme[0] if pl.nearest_nvme else None, env=own[r])
        for r, pl in enumerate(chosen))
    all_cpus = tuple(sorted({c for cpus in t.numa_cpus.values() for c in cpus}
                            | {c for g in t.gpus for c in g.cpus}))
    if res and all_cpus and not set(res) <= set(all_cpus):
        warnings.append(f"reserved CPUs {format_cpulist(set(res) - set(all_cpus))} are not on this node")
    notes = ([EFA_NOTE] if tr is Transport.EFA else []) + (
        [NCCL_FILE_NOTE] if t.source.startswith("nccl") and any(r.cpus for r in out) else [])
    return BindingPlan(ranks=out, reserved=res, all_cpus=all_cpus, transport=tr, env=tuple(env),
                       warnings=tuple(dict.fromkeys(warnings)), notes=tuple(notes))

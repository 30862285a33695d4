"""How one node is wired: GPUs, NICs, NVMe drives, NUMA nodes and the path between them.

Every topology parser (``nvidia-smi topo -m``, NCCL topology XML, hwloc XML, sysfs) produces one
``NodeTopology``. What a format cannot tell is ``None`` (never a guessed value) and the reason is
listed in ``NodeTopology.missing`` so that a partial answer says what is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum


class PathType(Enum):
    """The path between two devices, best first (``nvidia-smi topo -m`` legend).

    ``NV`` NVLink (bonded set of links); ``PIX`` at most one PCIe switch; ``PXB`` several PCIe
    bridges without the host bridge; ``PHB`` through one PCIe host bridge (the CPU); ``NODE``
    between host bridges within one NUMA node; ``SYS`` across the SMP interconnect between NUMA
    nodes (QPI/UPI/xGMI). ``UNKNOWN``: the source could not tell.
    """

    NV = "NV"
    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    NODE = "NODE"
    SYS = "SYS"
    UNKNOWN = "UNKNOWN"

    @property
    def rank(self) -> int:
        """0 for the best path (NVLink) … 5 for SYS, 9 for UNKNOWN."""
        return _RANK[self]

    @property
    def gdr_local(self) -> bool:
        """True when GPUDirect RDMA is fast on this path (NCCL's default: PXB or better)."""
        return self.rank <= _RANK[PathType.PXB]

    @classmethod
    def parse(cls, text: str) -> PathType:
        """``NV12`` → NV, ``PIX`` … ``SYS``; old names ``SOC`` (=SYS) and ``PSB`` (=PXB)."""
        t = text.strip().upper()
        if _NV_RE.fullmatch(t):
            return cls.NV
        t = _ALIASES.get(t, t)
        try:
            return cls(t)
        except ValueError:
            return cls.UNKNOWN


_NV_RE = re.compile(r"NV\d+")
_HEX = re.compile(r"[0-9a-f]+")
_ALIASES = {"SOC": "SYS", "PSB": "PXB"}
_RANK = {
    PathType.NV: 0, PathType.PIX: 1, PathType.PXB: 2, PathType.PHB: 3, PathType.NODE: 4,
    PathType.SYS: 5, PathType.UNKNOWN: 9,
}


class NicKind(Enum):
    INFINIBAND = "infiniband"
    ETHERNET = "ethernet"
    EFA = "efa"
    UNKNOWN = "unknown"


#: PCI vendor ids that decide a NIC's kind on their own (Amazon: EFA devices are 0x1d0f:0xefa*)
_AMAZON = "0x1d0f"
_RDMA_ETH_VENDORS = {"0x15b3", "0x14e4", "0x8086", "0x1077", "0x1dd8", "0x19e5", "0x1924"}


def nic_kind_from_pci(cls: str | None = None, vendor: str | None = None,
                      device: str | None = None, link_layer: str | None = None) -> NicKind:
    """The kind a source states, never guessed from a device name: PCI class 0x0207 or a port
    link layer ``InfiniBand`` is InfiniBand; an Amazon (0x1d0f) device 0xefa* is EFA; a port
    link layer ``Ethernet`` or an Ethernet-class (0x0200) device of a known RDMA NIC vendor is
    Ethernet (RoCE when it is an RDMA device). An Ethernet-class device without a vendor is
    UNKNOWN: EFA and RoCE adapters both show class 0x0200; so is an Amazon device without its
    device id (ENA, 0xec20, is a plain Ethernet adapter of the same vendor and class)."""
    c, v, d = (x.strip().lower() if x else "" for x in (cls, vendor, device))
    ll = (link_layer or "").strip().lower()
    if c.startswith("0x0207") or ll == "infiniband":
        return NicKind.INFINIBAND
    if v == _AMAZON and d.startswith("0xefa"):
        return NicKind.EFA
    if ll == "ethernet" or (c.startswith("0x0200") and v in _RDMA_ETH_VENDORS):
        return NicKind.ETHERNET
    return NicKind.UNKNOWN


@dataclass(frozen=True, slots=True)
class NvLink:
    """An NVLink connection to ``peer`` (GPU index); ``links`` is the number of bonded links
    (``NV12`` → 12) when the source says it, ``bandwidth_mbs`` when it gives bandwidth instead;
    ``via_switch`` when the path goes through NVSwitch."""

    peer: int
    links: int | None = None
    bandwidth_mbs: float | None = None
    via_switch: bool = False


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU. ``index`` is the nvidia-smi/NVML index (PCI bus order unless the source says)."""

    index: int
    pci: str | None = None
    numa: int | None = None
    cpus: tuple[int, ...] = ()
    nvlinks: tuple[NvLink, ...] = ()
    model: str | None = None
    uuid: str | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None

    @property
    def nvlink_peers(self) -> tuple[int, ...]:
        return tuple(sorted({link.peer for link in self.nvlinks}))


@dataclass(frozen=True, slots=True)
class Nic:
    """One network adapter (an RDMA device name such as ``mlx5_0`` when known, else its PCI id).

    ``rate_gbps``/``state``/``port`` come from sysfs or ibstat-like sources; ``None`` when the
    format does not carry them. ``gdr`` is NCCL's GPUDirect-RDMA flag when the source gives it.
    ``rdma``: whether the adapter has an RDMA device (verbs: InfiniBand, RoCE, EFA) as the source
    states it (sysfs ``class/infiniband``, an hwloc ``OpenFabrics`` OS device); ``False`` for a
    plain network interface (an ENA, an Ethernet port without RDMA), ``None`` when not said.
    """

    name: str
    pci: str | None = None
    numa: int | None = None
    cpus: tuple[int, ...] = ()
    kind: NicKind = NicKind.UNKNOWN
    rate_gbps: float | None = None
    state: str | None = None
    port: int | None = None
    link_layer: str | None = None
    firmware: str | None = None
    netdev: str | None = None
    gdr: bool | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    rdma: bool | None = None


def is_rdma(n: Nic) -> bool:
    """Whether ``n`` can carry NCCL's verbs/libfabric traffic: as the source states it
    (``Nic.rdma``), else any adapter that is not a plain Ethernet interface (an Ethernet-kind
    adapter counts when it has a device name of its own besides its interface name: RoCE)."""
    if n.rdma is not None:
        return n.rdma
    return n.kind is not NicKind.ETHERNET or n.netdev != n.name


@dataclass(frozen=True, slots=True)
class Nvme:
    """One NVMe drive (controller or namespace name, e.g. ``nvme0`` / ``nvme0n1``)."""

    name: str
    pci: str | None = None
    numa: int | None = None


@dataclass(frozen=True, slots=True)
class NodeTopology:
    """One node's wiring as one source described it.

    ``gpu_nic`` maps ``(gpu index, nic name)`` to the path type; ``gpu_nvme`` likewise for NVMe
    names. ``numa_cpus`` maps each NUMA node to its CPU list. ``missing`` lists, in words, what
    the source could not tell (a partial answer); ``notes`` anything else worth saying.
    ``facts`` holds scalar attributes used when comparing nodes (driver, firmware, product …).
    """

    source: str
    where: str | None = None
    gpus: tuple[Gpu, ...] = ()
    nics: tuple[Nic, ...] = ()
    nvmes: tuple[Nvme, ...] = ()
    gpu_nic: Mapping[tuple[int, str], PathType] = field(default_factory=dict)
    gpu_nvme: Mapping[tuple[int, str], PathType] = field(default_factory=dict)
    numa_cpus: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    facts: Mapping[str, str] = field(default_factory=dict)
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def gpu(self, index: int) -> Gpu | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    def nic(self, name: str) -> Nic | None:
        for n in self.nics:
            if n.name == name:
                return n
        return None


# --- CPU list helpers (Linux cpulist "0-3,8,10-11" and hex masks "ff,ffff0000") -------------------

def parse_cpulist(text: str) -> tuple[int, ...]:
    """``"0-3,8"`` → (0, 1, 2, 3, 8). Raises ValueError on anything else (``""`` → ())."""
    out: set[int] = set()
    body = text.strip()
    if not body:
        return ()
    for part in body.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo_s, _, hi_s = part.partition("-")
            stride = 1
            if ":" in hi_s:  # kernel "0-15:2" stride syntax
                hi_s, _, st = hi_s.partition(":")
                stride = int(st)
            lo, hi = int(lo_s), int(hi_s)
            if lo > hi or hi - lo > 1 << 16 or stride < 1:
                raise ValueError(f"bad CPU range {part!r}")
            out.update(range(lo, hi + 1, stride))
        else:
            out.add(int(part))
    if any(c < 0 for c in out):
        raise ValueError(f"negative CPU in {text!r}")
    return tuple(sorted(out))


def format_cpulist(cpus: Iterable[int]) -> str:
    """(0, 1, 2, 3, 8) → ``"0-3,8"`` (the grammar of taskset -c, numactl and systemd)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def parse_hexmask(text: str) -> tuple[int, ...]:
    """A Linux/NCCL affinity mask ``"000000ff,ffff0000"`` (32-bit groups, most significant first)
    or an hwloc bitmap ``"0x03000003"`` / ``"0x0000000f,0xffffffff"`` → CPU numbers."""
    body = text.strip().lower()
    if not body:
        return ()
    groups = [g.strip() for g in body.split(",")]
    if len(groups) > 4096:
        raise ValueError(f"mask {text[:40]!r}... has more than 4096 groups")
    value = 0
    for g in groups:
        g = g[2:] if g.startswith("0x") else g
        if len(g) > 8 and len(groups) > 1 or len(g) > 4096:
            raise ValueError(f"bad mask group in {text!r}")
        if g and not _HEX.fullmatch(g):  # int() would take "-5" and "+f": a negative never ends
            raise ValueError(f"not a hex CPU mask: {text[:60]!r}")
        value = (value << 32) | int(g or "0", 16)  # hwloc writes an all-zero group as ""
    bits = bin(value)[:1:-1]
    return tuple(i for i, b in enumerate(bits) if b == "1")


def format_hexmask(cpus: Iterable[int]) -> str:
    """CPU numbers → ``0x…`` mask (Slurm ``mask_cpu:`` and ``taskset`` mask grammar)."""
    value = 0
    for c in cpus:
        value |= 1 << c
    return hex(value)

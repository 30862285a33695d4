"""hwloc XML (``lstopo --of xml``; formats 1.x, 2.x and 3.x) → ``NodeTopology`` (pure).

The object tree is ``Machine`` → ``Package``/``NUMANode`` … with I/O children: host bridges
(``Bridge`` with ``bridge_type="0-1"``), PCI bridges and switches (``Bridge`` ``1-1``),
``PCIDev`` (``pci_type="CCSS [vvvv:dddd] …"``, class first) and ``OSDev`` (``nvml0``,
``cuda0``, ``mlx5_0``, ``ib0``, ``nvme0n1`` …). Path types come from the PCI tree
(``topology_pci.classify``); NUMA placement and local CPUs from the nearest ancestor carrying a
``nodeset``/``cpuset``; NVLink peers from the ``NVLinkBandwidth`` distance matrix (GPU↔GPU
directly, or GPU↔NVSwitch↔GPU).

``osdev_type`` is an enum in formats 1.x/2.x (0 block, 1 GPU, 2 network, 3 OpenFabrics,
4 DMA, 5 co-processor) and a bit mask in 3.x (1 storage, 2 memory, 4 GPU, 8 co-processor,
16 network, 32 OpenFabrics, 64 DMA). Other format versions are refused with a clear error.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from minutiae.analyses.topology.parse.pci import PciPlace, classify
from minutiae.errors import ParseError
from minutiae.model.topology import (
    Gpu,
    Nic,
    NicKind,
    NodeTopology,
    NvLink,
    Nvme,
    nic_kind_from_pci,
    parse_hexmask,
)

_PCI_TYPE = re.compile(r"^([0-9a-fA-F]{4})\s+\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")
_IB_STATE = {"1": "DOWN", "2": "INIT", "3": "ARMED", "4": "ACTIVE", "5": "ACTIVE_DEFER"}
_COMPUTE = ("nvml", "cuda", "opencl", "rsmi", "ze", "ve")


@dataclass(frozen=True, slots=True)
class _OsKinds:
    storage: bool = False
    gpu: bool = False
    network: bool = False
    openfabrics: bool = False


def _osdev_kinds(value: str | None, major: int) -> _OsKinds:
    try:
        v = int(value or "", 0)
    except ValueError:
        return _OsKinds()
    if major >= 3:
        return _OsKinds(storage=bool(v & 1), gpu=bool(v & (4 | 8)), network=bool(v & 16),
                        openfabrics=bool(v & 32))
    return _OsKinds(storage=v == 0, gpu=v in (1, 5), network=v == 2, openfabrics=v == 3)


def _major(root: ET.Element, where: str | None) -> int:
    version = root.get("version")
    if version is None:
        return 1
    m = re.fullmatch(r"(\d+)(?:\.\d+)*", version.strip())
    if not m or int(m.group(1)) not in (1, 2, 3):
        raise ParseError(f"hwloc XML format version {version!r} is not supported (1.x, 2.x, 3.x)",
                         where)
    return int(m.group(1))


def _os_index(elem: ET.Element) -> int | None:
    try:
        return int(elem.get("os_index", ""))
    except ValueError:
        return None


@dataclass
class _Found:
    obj: ET.Element
    busid: str
    cls: str
    vendor: str
    device: str
    place: PciPlace
    cpus: tuple[int, ...]
    osdevs: list[tuple[ET.Element, _OsKinds]]


def looks_like_hwloc(text: str) -> bool:
    return "<topology" in text[:2048]


class _Walker:
    """One pass over the object tree: NUMA CPU sets, PCI devices with their place, facts."""

    def __init__(self, where: str | None, major: int) -> None:
        self.where, self.major = where, major
        self.numa_cpus: dict[int, tuple[int, ...]] = {}
        self.found: list[_Found] = []
        self.facts: dict[str, str] = {}

    def mask(self, text: str | None) -> tuple[int, ...]:
        if not text:
            return ()
        try:
            return parse_hexmask(text)
        except ValueError as exc:
            raise ParseError(f"unreadable CPU bitmap: {exc}", self.where) from None

    def walk(self, elem: ET.Element, numa: int | None, cpus: tuple[int, ...],
             chain: tuple[str, ...], host: bool) -> None:
        for child in elem:
            if child.tag != "object" or child.get("type") == "OSDev":
                continue
            ty = child.get("type")
            if ty == "NUMANode":
                node = _os_index(child)
                node_cpus = self.mask(child.get("cpuset"))
                if node is not None:
                    self.numa_cpus[node] = node_cpus
                # hwloc 1.x: I/O hangs below its NUMA node (2.x: NUMA nodes are leaves)
                self.walk(child, node if node is not None else numa, node_cpus or cpus, chain, host)
            elif ty in ("Bridge", "PCIDev"):
                self._pci(child, ty, numa, cpus, chain, host)
            else:
                self._cpu_side(child, ty, numa, cpus, chain, host)

    def _pci(self, child: ET.Element, ty: str, numa: int | None, cpus: tuple[int, ...],
             chain: tuple[str, ...], host: bool) -> None:
        busid = (child.get("pci_busid") or "").lower()
        if ty == "PCIDev":
            m = _PCI_TYPE.match(child.get("pci_type") or "")
            osdevs = [(o, _osdev_kinds(o.get("osdev_type"), self.major))
                      for o in child.findall("object") if o.get("type") == "OSDev"]
            self.found.append(_Found(child, busid, (m.group(1) if m else "").lower(),
                                     (m.group(2) if m else "").lower(), (m.group(3) if m else "").lower(),
                                     PciPlace(numa, chain, host), cpus, osdevs))
        node_id = busid or f"hostbridge:{child.get('bridge_pci') or child.get('id')}"
        top_is_host = host if chain else (ty == "Bridge" and
                                          (child.get("bridge_type") or "").startswith("0-"))
        self.walk(child, numa, cpus, (*chain, node_id), top_is_host)

    def _cpu_side(self, child: ET.Element, ty: str | None, numa: int | None, cpus: tuple[int, ...],
                  chain: tuple[str, ...], host: bool) -> None:
        """A CPU-side object: its nodeset/cpuset set the locality of the I/O below it."""
        sub_numa, sub_cpus = numa, cpus
        nodes = self.mask(child.get("nodeset")) if child.get("nodeset") else None
        if nodes is not None:
            sub_numa = nodes[0] if len(nodes) == 1 else None
        if child.get("cpuset"):
            sub_cpus = self.mask(child.get("cpuset"))
        if ty == "Machine":
            for info in child.findall("info"):
                if info.get("name") in ("DMIProductName", "DMIBoardName", "OSRelease"):
                    self.facts[info.get("name", "")] = info.get("value", "")
        self.walk(child, sub_numa, sub_cpus, chain, host)


def _is_gpu(f: _Found) -> bool:
    compute = any(k.gpu and (o.get("name") or "").startswith(_COMPUTE) for o, k in f.osdevs)
    return f.cls in ("0302", "0380") or (f.cls.startswith("03") and (f.vendor == "10de" or compute))


def _index_of(gpu_f: list[_Found], notes: list[str]) -> dict[str, int]:
    """GPU index: the ``nvmlN`` OS device when every GPU has one, else PCI bus order."""
    nvml_idx: dict[str, int] = {}
    for f in gpu_f:
        for o, _k in f.osdevs:
            m = re.fullmatch(r"nvml(\d+)", o.get("name") or "")
            if m:
                nvml_idx[f.busid] = int(m.group(1))
    use_nvml = bool(gpu_f) and len(nvml_idx) == len(gpu_f)
    if gpu_f and not use_nvml:
        notes.append("GPU index is PCI bus order (no nvml OS device for every GPU)")
    return {f.busid: (nvml_idx[f.busid] if use_nvml else i) for i, f in enumerate(gpu_f)}


def _info(f: _Found, name: str) -> str | None:
    return next((i.get("value") for o, _ in f.osdevs for i in o.findall("info")
                 if i.get("name") == name), None)


def _nic(f: _Found) -> Nic:
    of = next((o for o, k in f.osdevs if k.openfabrics), None)
    net = next((o for o, k in f.osdevs if k.network and not k.openfabrics), None)
    name = (of.get("name") if of is not None else None) or (
        net.get("name") if net is not None else None) or f.busid
    infos = {i.get("name"): i.get("value") for i in (of.findall("info") if of is not None else [])}
    state = _IB_STATE.get(infos.get("Port1State") or "")
    kind = nic_kind_from_pci(f"0x{f.cls}", f"0x{f.vendor}" if f.vendor else None,
                             f"0x{f.device}" if f.device else None,
                             link_layer=infos.get("Port1LinkLayer"))
    lid = (infos.get("Port1LID") or "0").lower()
    if kind is NicKind.UNKNOWN and (f.cls == "0c06" or lid not in ("0", "0x0", "0x0000")):
        kind = NicKind.INFINIBAND  # old adapters' InfiniBand class; only IB ports have a LID
    return Nic(name=name, pci=f.busid, numa=f.place.numa, cpus=f.cpus, kind=kind,
               state=state, port=1 if state else None,
               netdev=net.get("name") if net is not None else None,
               rdma=of is not None if (of is not None or net is not None) else None)


def _missing(found: list[_Found], gpu_f: list[_Found]) -> list[str]:
    missing = []
    if not gpu_f:
        missing.append("no GPU in this topology")
    if not any(f.osdevs for f in found) and found:
        missing.append("no OS devices (exported without I/O names): NICs named by PCI bus id")
    if not found:
        missing.append("no PCI devices (exported without I/O objects)")
    return missing + ["NIC rate, PCIe generation/width, driver and firmware are not in hwloc XML"]


def parse_hwloc_xml(data: str | bytes, where: str | None = None) -> NodeTopology:
    try:
        root = ET.fromstring(data)
    except (ET.ParseError, ValueError, LookupError) as exc:  # LookupError: encoding="bogus"
        raise ParseError(f"not well-formed XML ({exc})", where) from None
    if root.tag != "topology":
        raise ParseError(f"not an hwloc topology (root element <{root.tag}>)", where)
    major = _major(root, where)
    notes: list[str] = []
    w = _Walker(where, major)
    w.walk(root, None, (), (), False)
    found = w.found
    gpu_f = sorted((f for f in found if _is_gpu(f)), key=lambda f: f.busid)
    nic_f = sorted((f for f in found if not _is_gpu(f) and (
        f.cls.startswith("02") or f.cls == "0c06" or any(k.openfabrics for _, k in f.osdevs))),
        key=lambda f: f.busid)
    nvme_f = sorted((f for f in found if f.cls == "0108"), key=lambda f: f.busid)
    index_of = _index_of(gpu_f, notes)
    nvlinks = _nvlinks(root, gpu_f, index_of)
    gpus = [Gpu(index=index_of[f.busid], pci=f.busid, numa=f.place.numa, cpus=f.cpus,
                nvlinks=tuple(nvlinks.get(index_of[f.busid], ())), model=_info(f, "GPUModel"),
                uuid=_info(f, "NVIDIAUUID")) for f in gpu_f]
    nics = [_nic(f) for f in nic_f]
    nic_place = {n.name: f.place for n, f in zip(nics, nic_f, strict=True)}
    nvmes = [Nvme(name=next((o.get("name") or "" for o, k in f.osdevs if k.storage and o.get("name")),
                            f.busid), pci=f.busid, numa=f.place.numa) for f in nvme_f]
    nvme_place = {d.name: f.place for d, f in zip(nvmes, nvme_f, strict=True)}
    gpu_nic = {(index_of[f.busid], name): classify(f.place, place)
               for f in gpu_f for name, place in nic_place.items()}
    gpu_nvme = {(index_of[f.busid], name): classify(f.place, place)
                for f in gpu_f for name, place in nvme_place.items()}
    return NodeTopology(
        source=f"hwloc-xml-v{major}", where=where,
        gpus=tuple(sorted(gpus, key=lambda g: g.index)), nics=tuple(nics), nvmes=tuple(nvmes),
        gpu_nic=gpu_nic, gpu_nvme=gpu_nvme, numa_cpus=dict(sorted(w.numa_cpus.items())),
        facts=w.facts, missing=tuple(_missing(found, gpu_f)), notes=tuple(notes),
    )


def _bandwidth_matrix(root: ET.Element) -> tuple[list[str], list[int]] | None:
    dist = next((d for d in root.iter("distances2hetero") if d.get("name") == "NVLinkBandwidth"),
                None)
    if dist is None:
        return None
    refs = " ".join(i.text or "" for i in dist.findall("indexes")).split()
    try:
        values = [int(v) for u in dist.findall("u64values") for v in (u.text or "").split()]
    except ValueError:
        return None
    if not refs or len(values) != len(refs) ** 2:
        return None
    return refs, values


def _nvlinks(root: ET.Element, gpu_f: list[_Found], index_of: dict[str, int]) -> dict[int, list[NvLink]]:
    """NVLink peers from the ``NVLinkBandwidth`` heterogeneous distance matrix (hwloc ≥ 2.x)."""
    mat = _bandwidth_matrix(root)
    if mat is None:
        return {}
    refs, values = mat
    n = len(refs)
    gp_gpu = {key: index_of[f.busid] for f in gpu_f
              for key in [f.obj.get("gp_index")] + [o.get("gp_index") for o, _ in f.osdevs] if key}
    switches = {o.get("gp_index") for o in root.iter("object")
                if o.get("type") == "PCIDev" and o.get("subtype") == "NVSwitch"}
    ids = [r.partition(":")[2] for r in refs]
    out: dict[int, dict[int, NvLink]] = {}
    gpu_sw: dict[int, dict[int, int]] = {}
    parent: dict[int, int] = {}  # union-find over NVSwitches linked to each other

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for i, a in enumerate(ids):
        ga = gp_gpu.get(a)
        for j, b in enumerate(ids):
            bw = values[i * n + j]
            if i == j or bw <= 0:
                continue
            if ga is None:
                if a in switches and b in switches:
                    parent[find(i)] = find(j)
                continue
            gb = gp_gpu.get(b)
            if gb is not None and gb != ga:
                out.setdefault(ga, {})[gb] = NvLink(peer=gb, bandwidth_mbs=float(bw))
            elif b in switches:
                gpu_sw.setdefault(ga, {})[j] = bw
    fabric = {ga: {find(j) for j in sws} for ga, sws in gpu_sw.items()}
    for ga, sws in gpu_sw.items():
        total = float(sum(sws.values()))
        for gb in gpu_sw:
            if gb != ga and fabric[ga] & fabric[gb] and gb not in out.get(ga, {}):
                out.setdefault(ga, {})[gb] = NvLink(peer=gb, bandwidth_mbs=total, via_switch=True)
    return {g: sorted(peers.values(), key=lambda x: x.peer) for g, peers in out.items()}

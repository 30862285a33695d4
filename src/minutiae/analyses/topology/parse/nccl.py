"""NCCL topology XML (``NCCL_TOPO_FILE`` / ``NCCL_TOPO_DUMP_FILE``) → ``NodeTopology`` (pure).

Schema (NCCL ``src/graph/xml.cc``): ``<system version="1">`` holding ``<cpu numaid affinity>``
elements, each holding a tree of ``<pci busid class link_speed link_width>`` (class 0x0604 is a
PCIe switch, which NCCL flattens to one element), leaves ``<gpu dev sm rank gdr>`` with
``<nvlink target count tclass>`` children and ``<nic><net name dev speed port gdr/></nic>``.
Cloud vendors ship hand-written files that carry only the ``<pci>`` elements (class 0x0302 GPU,
0x0207 InfiniBand, 0x0200 Ethernet/EFA): then GPUs are numbered in PCI bus order (what
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and nvidia-smi use) and NICs are named by their PCI bus id.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from minutiae.analyses.topology.parse.pci import PciPlace, classify
from minutiae.errors import ParseError
from minutiae.model.topology import (
    Gpu,
    Nic,
    NodeTopology,
    NvLink,
    Nvme,
    PathType,
    nic_kind_from_pci,
    parse_hexmask,
)

_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def pcie_gen(speed: str | None) -> int | None:
    """``"16.0 GT/s PCIe"`` / ``"8 GT/s"`` / ``"15.753846"`` (hwloc GB/s per lane ×…) → gen."""
    if not speed:
        return None
    m = re.match(r"\s*([\d.]+)\s*GT/s", speed)
    if not m:
        return None
    try:
        return _GEN.get(float(m.group(1)))
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


def _width(text: str | None) -> int | None:
    w = _int(text)
    return w if w else None  # NCCL writes link_width="0" when it does not know


@dataclass
class _Dev:
    kind: str  # gpu | nic | nvme
    busid: str | None
    place: PciPlace
    elem: ET.Element
    pci: ET.Element | None
    cpus: tuple[int, ...]
    nets: list[ET.Element] = field(default_factory=list)

    @property
    def numa(self) -> int | None:
        """The device's NUMA node; None where NCCL wrote ``numaid="-1"`` (the kernel gave none,
        as on the H200 VM of tests/data/h200). The place keeps -1: all under one CPU."""
        n = self.place.numa
        return n if n is None or n >= 0 else None


def _root(data: str | bytes, where: str | None, notes: list[str]) -> ET.Element:
    try:
        root = ET.fromstring(data)
    except (ET.ParseError, ValueError, LookupError) as exc:  # LookupError: encoding="bogus"
        raise ParseError(f"not well-formed XML ({exc})", where) from None
    if root.tag == "graphs":
        raise ParseError("this is an NCCL graph file (NCCL_GRAPH_FILE: ring/tree channels), "
                         "not a topology file", where)
    if root.tag != "system":
        raise ParseError(f"not an NCCL topology file (root element <{root.tag}>, expected <system>)",
                         where)
    version = root.get("version")
    if version not in ("1", "2"):
        notes.append(f"NCCL topology XML version {version!r} is newer than the versions read "
                     "here (1, 2); read as version 1")
    return root


def _walk(elem: ET.Element, numa: int | None, chain: tuple[str, ...], cpus: tuple[int, ...],
          devs: list[_Dev]) -> None:
    for child in elem:
        if child.tag == "pci":
            busid = (child.get("busid") or "").lower() or None
            cls = (child.get("class") or "").lower()
            gpu = child.find("gpu")
            nic = child.find("nic")
            place = PciPlace(numa, chain)
            if gpu is not None or cls.startswith(("0x0302", "0x0300")):
                devs.append(_Dev("gpu", busid, place, gpu if gpu is not None else child, child, cpus))
            elif nic is not None or cls.startswith("0x02"):
                devs.append(_Dev("nic", busid, place, child, child, cpus,
                                 nets=list(nic.iter("net")) if nic is not None else []))
            elif cls.startswith("0x0108"):
                devs.append(_Dev("nvme", busid, place, child, child, cpus))
            elif len(child):
                _walk(child, numa, (*chain, busid or "?"), cpus, devs)
        elif child.tag == "nic":
            devs.append(_Dev("nic", None, PciPlace(numa, chain), child, None, cpus,
                             nets=list(child.iter("net"))))


def _devices(root: ET.Element, where: str | None) -> tuple[list[_Dev], dict[int, tuple[int, ...]]]:
    devs: list[_Dev] = []
    numa_cpus: dict[int, tuple[int, ...]] = {}
    for cpu in root.iter("cpu"):
        numa = _int(cpu.get("numaid"))
        cpus: tuple[int, ...] = ()
        aff = cpu.get("affinity")
        if aff:
            try:
                cpus = parse_hexmask(aff)
            except ValueError as exc:
                raise ParseError(f"cpu numaid={numa}: unreadable affinity: {exc}", where) from None
        if numa is not None and numa >= 0:
            numa_cpus[numa] = cpus
        _walk(cpu, numa, (), cpus, devs)
    return devs, numa_cpus


def _gpu_key(d: _Dev) -> tuple[int, str]:
    """GPU index: ``<gpu dev>`` when present, else PCI bus order."""
    dev = _int(d.elem.get("dev")) if d.elem.tag == "gpu" else None
    return (dev if dev is not None else 1 << 20, d.busid or "")


def _links(d: _Dev, idx: int, by_bus: dict[str, int], notes: list[str],
           switch_peers: list[int]) -> list[NvLink]:
    links: list[NvLink] = []
    for nv in d.elem.findall("nvlink") if d.elem.tag == "gpu" else []:
        target = (nv.get("target") or "").lower()
        count = _int(nv.get("count"))
        if (nv.get("tclass") or "").lower().startswith("0x0680"):
            if idx not in switch_peers:  # a dump has one <nvlink> per NVSwitch (4 on HGX H100)
                switch_peers.append(idx)
            links.append(NvLink(peer=-1, links=count, via_switch=True))
        elif target == d.busid:
            notes.append(f"GPU{idx}: NVLink entry pointing at itself ignored")
        elif target in by_bus:
            links.append(NvLink(peer=by_bus[target], links=count))
    return links


def _via_switch(gpus: list[Gpu], switch_peers: list[int]) -> list[Gpu]:
    """NVSwitch: every GPU linked to a switch is a peer of every other such GPU."""
    resolved = []
    for g in gpus:
        sw = [lk for lk in g.nvlinks if lk.via_switch]
        direct = [lk for lk in g.nvlinks if not lk.via_switch]
        if sw:
            count = sum(lk.links or 0 for lk in sw) or None
            direct += [NvLink(peer=p, links=count, via_switch=True)
                       for p in switch_peers if p != g.index]
        resolved.append(Gpu(g.index, g.pci, g.numa, g.cpus, tuple(direct), g.model, g.uuid,
                            g.pcie_gen, g.pcie_width))
    return resolved


def _gpus(gpus_d: list[_Dev], notes: list[str]) -> list[Gpu]:
    by_bus = {d.busid: i for i, d in enumerate(gpus_d) if d.busid}
    gpus: list[Gpu] = []
    switch_peers: list[int] = []
    for i, d in enumerate(gpus_d):
        dev_attr = _int(d.elem.get("dev")) if d.elem.tag == "gpu" else None
        idx = dev_attr if dev_attr is not None else i
        pci = d.pci
        gpus.append(Gpu(
            index=idx, pci=d.busid, numa=d.numa, cpus=d.cpus,
            nvlinks=tuple(_links(d, idx, by_bus, notes, switch_peers)),
            pcie_gen=pcie_gen(pci.get("link_speed")) if pci is not None else None,
            pcie_width=_width(pci.get("link_width")) if pci is not None else None,
        ))
    return _via_switch(gpus, switch_peers) if switch_peers else gpus


def _nics(devs: list[_Dev], missing: list[str]) -> tuple[list[Nic], dict[str, PciPlace]]:
    nics: list[Nic] = []
    places: dict[str, PciPlace] = {}
    unnamed = 0
    for d in sorted((d for d in devs if d.kind == "nic"), key=lambda d: d.busid or ""):
        pci = d.pci
        cls, vendor, device = ((pci.get(k) or "").lower() if pci is not None else ""
                               for k in ("class", "vendor", "device"))
        kind = nic_kind_from_pci(cls, vendor, device)
        gen = pcie_gen(pci.get("link_speed")) if pci is not None else None
        width = _width(pci.get("link_width")) if pci is not None else None
        for net in d.nets:
            name = net.get("name") or d.busid or f"net{net.get('dev')}"
            speed = _int(net.get("speed"))
            nics.append(Nic(
                name=name, pci=d.busid, numa=d.numa, cpus=d.cpus, kind=kind,
                rate_gbps=speed / 1000 if speed else None, port=_int(net.get("port")),
                gdr=net.get("gdr") == "1" if net.get("gdr") else None,
                pcie_gen=gen, pcie_width=width))
            places[name] = d.place
        if not d.nets:
            unnamed += 1
            name = d.busid or f"nic{unnamed}"
            nics.append(Nic(name=name, pci=d.busid, numa=d.numa, cpus=d.cpus, kind=kind,
                            pcie_gen=gen, pcie_width=width))
            places[name] = d.place
    if unnamed:
        missing.append(f"{unnamed} NIC(s) carry no <net> name in this file: named by PCI bus id "
                       "(use --sysfs-root or a dump from the node for RDMA device names)")
    return nics, places


def parse_nccl_topo(data: str | bytes, where: str | None = None) -> NodeTopology:
    notes: list[str] = []
    missing: list[str] = []
    devs, numa_cpus = _devices(_root(data, where, notes), where)
    gpus_d = sorted((d for d in devs if d.kind == "gpu"), key=_gpu_key)
    gpus = _gpus(gpus_d, notes)
    nics, nic_places = _nics(devs, missing)
    nvme_d = [d for d in devs if d.kind == "nvme"]
    nvmes = [Nvme(name=d.busid or "nvme?", pci=d.busid, numa=d.numa) for d in nvme_d]
    gpu_nic: dict[tuple[int, str], PathType] = {}
    gpu_nvme: dict[tuple[int, str], PathType] = {}
    for g, d in zip(gpus, gpus_d, strict=True):
        for n in nics:
            gpu_nic[(g.index, n.name)] = classify(d.place, nic_places[n.name])
        for drive, dn in zip(nvmes, nvme_d, strict=True):
            gpu_nvme[(g.index, drive.name)] = classify(d.place, dn.place)
    if not gpus:
        missing.append("no GPU in this file")
    missing.append("NIC link state, driver and firmware are not in NCCL topology XML")
    return NodeTopology(
        source="nccl-topo-xml", where=where, gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        nics=tuple(nics), nvmes=tuple(nvmes), gpu_nic=gpu_nic, gpu_nvme=gpu_nvme,
        numa_cpus=dict(sorted(numa_cpus.items())), missing=tuple(missing), notes=tuple(notes),
    )

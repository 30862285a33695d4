"""A raw sysfs snapshot (strings read by ``sources.topology_sysfs``) → ``NodeTopology`` (pure).

GPUs are the NVIDIA display/3D-class PCI functions (class 0x0300xx/0x0302xx, vendor 0x10de),
numbered in PCI bus order like nvidia-smi. NICs are the RDMA devices of
``/sys/class/infiniband`` (InfiniBand, RoCE and EFA alike: the devices NCCL can use), with
rate/state/link layer of their first port and firmware. NVMe controllers come from
``/sys/class/nvme``. Path types follow from each device's place under its host bridge
(``/sys/devices/pci0000:00/0000:00:01.0/…``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from minutiae.analyses.topology.parse.nccl import pcie_gen
from minutiae.analyses.topology.parse.pci import PciPlace, classify
from minutiae.model.topology import (
    Gpu,
    Nic,
    NodeTopology,
    Nvme,
    PathType,
    nic_kind_from_pci,
    parse_cpulist,
)


@dataclass(frozen=True, slots=True)
class PciDevInfo:
    """One ``/sys/bus/pci/devices/<busid>``: ``chain`` is the host bridge then the bridges above
    it (from the resolved ``/sys/devices/pci…/…`` path; empty when sysfs gave no tree)."""

    busid: str
    chain: tuple[str, ...] = ()
    attrs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class IbDevInfo:
    name: str
    busid: str | None = None
    attrs: Mapping[str, str] = field(default_factory=dict)
    ports: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    netdevs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SysfsTopoSnapshot:
    root: str
    pci: tuple[PciDevInfo, ...] = ()
    ib: tuple[IbDevInfo, ...] = ()
    nvme: tuple[tuple[str, str | None], ...] = ()
    numa: Mapping[int, str] = field(default_factory=dict)
    facts: Mapping[str, str] = field(default_factory=dict)
    unreadable: tuple[str, ...] = ()


def _int(text: str | None) -> int | None:
    try:
        return int((text or "").strip(), 0)
    except ValueError:
        return None


def parse_ib_rate(text: str | None) -> float | None:
    """``"400 Gb/sec (4X NDR)"`` → 400.0."""
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", text or "")
    return float(m.group(1)) if m else None


def parse_ib_state(text: str | None) -> str | None:
    """``"4: ACTIVE"`` → ``"ACTIVE"``; ``"5: LinkUp"`` → ``"LinkUp"``."""
    if not text or not text.strip():
        return None
    return text.strip().partition(":")[2].strip() or text.strip()


def _numa_of(d: PciDevInfo) -> int | None:
    n = _int(d.attrs.get("numa_node"))
    return n if n is not None and n >= 0 else None


def _cpus_of(d: PciDevInfo | None, notes: list[str]) -> tuple[int, ...]:
    if d is None:
        return ()
    try:
        return parse_cpulist(d.attrs.get("local_cpulist", ""))
    except ValueError:
        notes.append(f"{d.busid}: unreadable local_cpulist")
        return ()


def _link(d: PciDevInfo | None) -> tuple[int | None, int | None, int | None, int | None]:
    """(current gen, current width, max gen, max width) of a PCI function."""
    if d is None:
        return None, None, None, None
    return (pcie_gen(d.attrs.get("current_link_speed")), _int(d.attrs.get("current_link_width")) or None,
            pcie_gen(d.attrs.get("max_link_speed")), _int(d.attrs.get("max_link_width")) or None)


def _nic(ib: Any, pd: PciDevInfo | None, notes: list[str]) -> Nic:
    port_no = min(ib.ports) if ib.ports else None
    port = ib.ports.get(port_no, {}) if port_no is not None else {}
    link_layer = (port.get("link_layer") or "").strip() or None
    gen, width, max_gen, max_width = _link(pd)
    kind = nic_kind_from_pci(pd.attrs.get("class") if pd else None,
                             pd.attrs.get("vendor") if pd else None,
                             pd.attrs.get("device") if pd else None, link_layer)
    return Nic(name=ib.name, pci=ib.busid, numa=_numa_of(pd) if pd else None,
               cpus=_cpus_of(pd, notes), kind=kind, rate_gbps=parse_ib_rate(port.get("rate")),
               state=parse_ib_state(port.get("state")), port=port_no, link_layer=link_layer,
               firmware=(ib.attrs.get("fw_ver") or "").strip() or None,
               netdev=ib.netdevs[0] if ib.netdevs else None, pcie_gen=gen, pcie_width=width,
               pcie_max_gen=max_gen, pcie_max_width=max_width, rdma=True)


def _missing(snap: SysfsTopoSnapshot, nics: list[Nic], gpus: list[Gpu]) -> list[str]:
    out = [f"unreadable: {u}" for u in snap.unreadable]
    unplaced = [n.name for n in nics if n.pci is None]
    if unplaced:
        out.append(f"no PCI device link for {', '.join(unplaced)}: NUMA and GPU paths unknown")
    if not snap.pci:
        out.append("no PCI devices under bus/pci/devices: GPUs not visible")
    elif not gpus:
        out.append("no NVIDIA GPU among the PCI devices")
    return out + ["NVLink peers are not in sysfs (use nvidia-smi topo -m)"]


def topology_from_sysfs(snap: SysfsTopoSnapshot) -> NodeTopology:
    notes: list[str] = []
    by_bus = {d.busid: d for d in snap.pci}

    def place(busid: str | None) -> PciPlace:
        d = by_bus.get(busid or "")
        return PciPlace(None, ()) if d is None else PciPlace(_numa_of(d), d.chain, bool(d.chain))

    gpu_devs = sorted((d for d in snap.pci
                       if d.attrs.get("vendor", "").lower() == "0x10de"
                       and d.attrs.get("class", "").lower().startswith(("0x0300", "0x0302"))),
                      key=lambda d: d.busid)
    gpus = []
    for i, d in enumerate(gpu_devs):
        gen, width, max_gen, max_width = _link(d)
        gpus.append(Gpu(index=i, pci=d.busid, numa=_numa_of(d), cpus=_cpus_of(d, notes),
                        pcie_gen=gen, pcie_width=width, pcie_max_gen=max_gen, pcie_max_width=max_width))
    nics = [_nic(ib, by_bus.get(ib.busid or ""), notes) for ib in sorted(snap.ib, key=lambda x: x.name)]
    nvmes = [Nvme(name=name, pci=bus, numa=_numa_of(by_bus[bus]) if bus in by_bus else None)
             for name, bus in sorted(snap.nvme)]
    gpu_nic = {(g.index, n.name): classify(place(g.pci), place(n.pci)) if n.pci else PathType.UNKNOWN
               for g in gpus for n in nics}
    gpu_nvme = {(g.index, v.name): classify(place(g.pci), place(v.pci)) if v.pci else PathType.UNKNOWN
                for g in gpus for v in nvmes}
    numa_cpus: dict[int, tuple[int, ...]] = {}
    for node, text in sorted(snap.numa.items()):
        try:
            numa_cpus[node] = parse_cpulist(text)
        except ValueError:
            notes.append(f"node{node}: unreadable cpulist {text!r}")
    return NodeTopology(
        source="sysfs", where=snap.root, gpus=tuple(gpus), nics=tuple(nics), nvmes=tuple(nvmes),
        gpu_nic=gpu_nic, gpu_nvme=gpu_nvme, numa_cpus=numa_cpus, facts=dict(snap.facts),
        missing=tuple(_missing(snap, nics, gpus)), notes=tuple(notes),
    )

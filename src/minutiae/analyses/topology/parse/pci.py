"""Path type between two PCI devices from their places in the PCI tree (pure).

Shared by the NCCL-XML, hwloc-XML and sysfs readers, which all see a tree of bridges:

* different NUMA nodes → ``SYS``;
* no common bridge, same NUMA node → ``NODE``;
* only the host bridge in common → ``PHB``;
* a common bridge below the host bridge: ``PIX`` when each device sits at most one bridge
  below it (one PCIe switch: upstream port, then one downstream port), else ``PXB``.

These are NVML's levels (SINGLE/MULTIPLE/HOSTBRIDGE/NODE/SYSTEM) as ``nvidia-smi topo -m``
prints them.
"""

from __future__ import annotations

from dataclasses import dataclass

from minutiae.model.topology import PathType


@dataclass(frozen=True, slots=True)
class PciPlace:
    """Where a device sits: ``chain`` is the bridges from the top of its tree down to its
    parent; ``host_bridge`` says whether ``chain[0]`` is a host bridge object (hwloc, sysfs) or
    the tree starts below it (NCCL's XML, which flattens switches and omits host bridges)."""

    numa: int | None
    chain: tuple[str, ...]
    host_bridge: bool = False


def classify(a: PciPlace, b: PciPlace) -> PathType:
    if a.numa is not None and b.numa is not None and a.numa != b.numa:
        return PathType.SYS
    k = 0
    for x, y in zip(a.chain, b.chain, strict=False):
        if x != y:
            break
        k += 1
    if k == 0:
        if a.numa is None or b.numa is None:
            return PathType.UNKNOWN
        return PathType.NODE
    if a.host_bridge and b.host_bridge and k == 1:
        return PathType.PHB
    if max(len(a.chain) - k, len(b.chain) - k) <= 1:
        return PathType.PIX
    return PathType.PXB

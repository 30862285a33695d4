"""The PCIe source: links and AER counters of the NVIDIA and Mellanox devices under
``<sysfs_root>/bus/pci/devices``."""

from __future__ import annotations

from minutiae.errors import SourceUnavailable
from minutiae.model import CheckResult, Status
from minutiae.node.result import unknown
from minutiae.node.sources.base import Reading, Request, Source

GROUP = "pcie"


def _read(req: Request) -> Reading | None:
    from minutiae.node.sources.pcie.read import read_sysfs_pcie

    root = req.cfg.sysfs_root
    try:
        snap = read_sysfs_pcie(root, time=req.now)
    except SourceUnavailable as exc:
        return Reading(result=unknown(GROUP, exc.reason))
    if not snap.observations and not snap.problems:
        note = f"no NVIDIA or Mellanox PCIe device with a link under {root}/bus/pci/devices"
        return Reading(result=CheckResult(GROUP, Status.OK, (), note, 0))
    return Reading(snap)


PCIE = Source("sysfs_pcie", GROUP, _read, components=(GROUP,))

"""Reads ``<sysfs_root>/bus/pci/devices/*`` link attributes of GPUs, NICs and NVSwitches."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from minutiae.errors import SourceUnavailable
from minutiae.model.snapshot import Snapshot, SnapshotBuilder
from minutiae.node.sources.pcie.parse import AER, ATTRS, SOURCE, parse_pcie_device
from minutiae.node.sources.read_sysfs import read_attr

#: vendors whose devices are checked by default: NVIDIA (GPU, NVSwitch) and Mellanox/NVIDIA NICs
DEFAULT_VENDORS = frozenset({"0x10de", "0x15b3"})


_read = read_attr


def read_sysfs_pcie(
    sysfs_root: Path | str,
    vendors: Collection[str] = DEFAULT_VENDORS,
    time: float | None = None,
) -> Snapshot:
    """Link speed/width of every PCI device of ``vendors`` that has link attributes.
    Raises ``SourceUnavailable`` when ``bus/pci/devices`` is absent under the root."""
    base = os.path.join(os.fspath(sysfs_root), "bus", "pci", "devices")
    try:
        entries = sorted(os.listdir(base))
    except OSError as exc:
        raise SourceUnavailable(SOURCE, f"{base}: {exc.strerror or exc}") from None
    b = SnapshotBuilder(SOURCE, time)
    for addr in entries:
        d = os.path.join(base, addr)
        vendor = (_read(os.path.join(d, "vendor")) or "").strip().lower()
        if vendor not in vendors:
            continue
        if not os.path.exists(os.path.join(d, "current_link_speed")):
            continue  # virtual functions and integrated devices have no link of their own
        files = {name: _read(os.path.join(d, name)) for name in ATTRS}
        for name in AER:
            if os.path.exists(os.path.join(d, name)):
                files[name] = _read(os.path.join(d, name))
        parse_pcie_device(b, addr, files, d)
    snap = b.build()
    gpus = sum(1 for o in snap.observations if o.metric == "device_kind" and o.value == "gpu")
    if gpus:
        b.add("node", "pcie_gpu_count", gpus)  # cross-check for the driver's GPU count
        snap = b.build()
    return snap

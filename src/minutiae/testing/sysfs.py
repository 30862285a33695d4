"""Builds real sysfs trees under a temporary directory for tests and benchmarks.

``ib_tree(root, snapshot)`` copies a captured ``/sys/class/infiniband`` (e.g. realdata's
``infiniband/gpud/sys-class-infiniband-h100.0``) to ``root/class/infiniband`` so that
``read_sysfs_ib(root)`` reads it exactly as it would read ``/sys``; ``set_file`` then changes a
counter or a state to build a fault. ``pcie_device`` writes one ``/sys/bus/pci/devices`` entry.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def ib_tree(root: Path, snapshot: Path) -> Path:
    """Copy a ``/sys/class/infiniband`` capture to ``root/class/infiniband``; returns ``root``."""
    dest = root / "class" / "infiniband"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(snapshot, dest, symlinks=False, dirs_exist_ok=True)
    return root


def set_file(root: Path, rel: str, text: str) -> Path:
    """Write ``text`` (no newline added, as sysfs attributes are read) at ``root/rel``."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def ib_port(root: Path, device: str, port: int | str = 1) -> str:
    """The relative path of a port directory, for ``set_file``."""
    return f"class/infiniband/{device}/ports/{port}"


def pcie_device(
    root: Path,
    address: str,
    *,
    speed: str = "32.0 GT/s PCIe",
    width: str = "16",
    max_speed: str = "32.0 GT/s PCIe",
    max_width: str = "16",
    pci_class: str = "0x030200",
    vendor: str = "0x10de",
) -> Path:
    """One ``/sys/bus/pci/devices/<address>`` entry with its link attributes (newline-terminated
    as the kernel writes them)."""
    d = root / "bus" / "pci" / "devices" / address
    d.mkdir(parents=True, exist_ok=True)
    for name, value in (
        ("current_link_speed", speed),
        ("current_link_width", width),
        ("max_link_speed", max_speed),
        ("max_link_width", max_width),
        ("class", pci_class),
        ("vendor", vendor),
    ):
        (d / name).write_text(value + "\n")
    return d

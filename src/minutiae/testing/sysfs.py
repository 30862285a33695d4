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
    aer: dict[str, int] | None = None,
) -> Path:
    """One ``/sys/bus/pci/devices/<address>`` entry with its link attributes (newline-terminated
    as the kernel writes them). ``aer={"correctable": n, "fatal": n, "nonfatal": n}`` adds the
    AER statistics files in the kernel's layout (Documentation/ABI/testing/
    sysfs-bus-pci-devices-aer_stats): one ``<name> <count>`` line per error, then the total."""
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
    if aer is not None:
        for kind, names, total in (
            ("correctable", _AER_COR, "TOTAL_ERR_COR"),
            ("fatal", _AER_UNCOR, "TOTAL_ERR_FATAL"),
            ("nonfatal", _AER_UNCOR, "TOTAL_ERR_NONFATAL"),
        ):
            n = aer.get(kind, 0)
            lines = [f"{name} {n if i == 0 else 0}" for i, name in enumerate(names)]
            (d / f"aer_dev_{kind}").write_text("\n".join([*lines, f"{total} {n}"]) + "\n")
    return d


_AER_COR = ("Receiver Error", "Bad TLP", "Bad DLLP", "RELAY_NUM Rollover", "Replay Timer Timeout",
            "Advisory Non-Fatal", "Corrected Internal Error", "Header Log Overflow")
_AER_UNCOR = ("Undefined", "Data Link Protocol", "Surprise Down Error", "Poisoned TLP",
              "Flow Control Protocol", "Completion Timeout", "Completer Abort", "Unexpected Completion",
              "Receiver Overflow", "Malformed TLP", "ECRC", "Unsupported Request", "ACS Violation",
              "Uncorrectable Internal Error", "MC Blocked TLP", "AtomicOp Egress Blocked",
              "TLP Prefix Blocked Error")

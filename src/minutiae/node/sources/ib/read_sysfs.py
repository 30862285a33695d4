"""Reads ``<sysfs_root>/class/infiniband/*/ports/*`` (the only I/O of the IB check).

``sysfs_root`` is ``/sys`` on a live node, or a captured tree (``--sysfs-root``). Each file is
read once, as text; a file that cannot be read is reported by the parser as a ``Problem``.
"""

from __future__ import annotations

import os
from pathlib import Path

from minutiae.errors import SourceUnavailable
from minutiae.model.snapshot import Snapshot, SnapshotBuilder
from minutiae.node.sources.ib.parse_sysfs import (
    SOURCE,
    parse_ib_port,
    with_fabric_ports,
    with_port_counts,
)
from minutiae.node.sources.read_sysfs import read_attr

PORT_FILES = ("state", "phys_state", "rate", "link_layer")
DEVICE_FILES = ("hca_type", "fw_ver", "board_id")


_read = read_attr


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def read_sysfs_ib(sysfs_root: Path | str, time: float | None = None) -> Snapshot:
    """All IB ports under ``sysfs_root``. Raises ``SourceUnavailable`` when there is no
    ``class/infiniband`` directory (no HCA, no driver, or a wrong root)."""
    base = os.path.join(os.fspath(sysfs_root), "class", "infiniband")
    if not os.path.isdir(base):
        raise SourceUnavailable(SOURCE, f"{base} not found (no InfiniBand driver or wrong --sysfs-root)")
    b = SnapshotBuilder(SOURCE, time)
    devices = _listdir(base)
    if not devices:
        raise SourceUnavailable(SOURCE, f"{base} is empty (no InfiniBand devices)")
    for dev in devices:
        ddir = os.path.join(base, dev)
        attrs = {name: _read(os.path.join(ddir, name)) for name in DEVICE_FILES}
        # on a live node <dev>/device links to the HCA's PCI function (…/0000:1a:00.0)
        link = os.path.join(ddir, "device")
        if os.path.islink(link):
            attrs["pci"] = os.path.basename(os.path.realpath(link))
        ports_dir = os.path.join(ddir, "ports")
        ports = _listdir(ports_dir)
        if not ports:
            b.problem(f"ib:{dev}", ports_dir, "no ports")
            continue
        for port in ports:
            pdir = os.path.join(ports_dir, port)
            files: dict[str, str | None] = {}
            for name in PORT_FILES:
                if os.path.exists(os.path.join(pdir, name)):
                    files[name] = _read(os.path.join(pdir, name))
            for group in ("counters", "hw_counters"):
                for counter in _listdir(os.path.join(pdir, group)):
                    files[f"{group}/{counter}"] = _read(os.path.join(pdir, group, counter))
            parse_ib_port(b, dev, port, files, pdir, attrs)
    return with_port_counts(with_fabric_ports(b.build()))

"""Read a node's topology from sysfs (root injectable: ``/sys`` on a node, a built tree in tests)
and read topology capture files (``--from FILE``, ``--learn DIR``).

Only I/O here: the strings go to ``parsers.topology_sysfs`` / ``parsers.topology``.
Read from ``<sysfs_root>``: ``bus/pci/devices/*/{class,vendor,numa_node,local_cpulist,
current_link_speed,current_link_width,max_link_speed,max_link_width}`` and the resolved
``devices/pci…`` path of each; ``class/infiniband/<dev>/{fw_ver,board_id,hca_type,device,
ports/<n>/{rate,state,phys_state,link_layer},device/net/*}``; ``class/nvme/<ctrl>/device``;
``devices/system/node/node<N>/cpulist``; ``module/nvidia/version`` (driver).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from minutiae import inputs
from minutiae.analyses.topology.parse.detect import parse_topology
from minutiae.analyses.topology.parse.sysfs import (
    IbDevInfo,
    PciDevInfo,
    SysfsTopoSnapshot,
    topology_from_sysfs,
)
from minutiae.errors import InputError, ParseError, SourceUnavailable
from minutiae.model.topology import NodeTopology

_BUSID = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_HOSTBRIDGE = re.compile(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$")
_PCI_ATTRS = ("class", "vendor", "device", "numa_node", "local_cpulist", "current_link_speed",
              "current_link_width", "max_link_speed", "max_link_width")
_MAX_FILE = 1 << 16
#: the most bytes ``read_capture`` accepts (a 1,000-device hwloc XML is ~2 MB)
MAX_CAPTURE = 64 << 20
#: a profile TOML (``topo --expect``) is some KiB
MAX_TEXT = 16 << 20


def _read(path: Path, unreadable: list[str]) -> str | None:
    try:
        with path.open("rb") as fh:
            return fh.read(_MAX_FILE).decode("utf-8", errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        unreadable.append(f"{path} ({exc.strerror or exc})")
        return None


def _pci_chain(link: Path) -> tuple[str, ...]:
    """``…/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0`` → host bridge and
    bridges above the device (``("pci0000:00", "0000:00:01.0", "0000:01:00.0")``)."""
    try:
        parts = Path(os.path.realpath(link)).parts
    except OSError:
        return ()
    for i, p in enumerate(parts):
        if _HOSTBRIDGE.match(p):
            chain = [p] + [q.lower() for q in parts[i + 1:] if _BUSID.match(q)]
            return tuple(chain[:-1])
    return ()


def _busid_of(link: Path) -> str | None:
    try:
        name = Path(os.path.realpath(link)).name
    except OSError:
        return None
    return name.lower() if _BUSID.match(name) else None


def read_sysfs_snapshot(sysfs_root: str | Path) -> SysfsTopoSnapshot:
    root = Path(sysfs_root)
    if not root.is_dir():
        raise SourceUnavailable("topology-sysfs", f"{root}: no such directory")
    unreadable: list[str] = []
    pci_dir = root / "bus" / "pci" / "devices"
    ib_dir = root / "class" / "infiniband"
    if not pci_dir.is_dir() and not ib_dir.is_dir():
        raise SourceUnavailable("topology-sysfs",
                                f"{root}: neither bus/pci/devices nor class/infiniband is there")
    pci: list[PciDevInfo] = []
    for entry in sorted(pci_dir.iterdir()) if pci_dir.is_dir() else []:
        if not _BUSID.match(entry.name):
            continue
        attrs = {}
        for a in _PCI_ATTRS:
            v = _read(entry / a, unreadable)
            if v is not None:
                attrs[a] = v
        pci.append(PciDevInfo(busid=entry.name.lower(), chain=_pci_chain(entry), attrs=attrs))
    ib: list[IbDevInfo] = []
    for dev in sorted(ib_dir.iterdir()) if ib_dir.is_dir() else []:
        attrs = {a: v for a in ("fw_ver", "board_id", "hca_type", "node_guid")
                 if (v := _read(dev / a, unreadable)) is not None}
        ports: dict[int, dict[str, str]] = {}
        pdir = dev / "ports"
        for p in sorted(pdir.iterdir()) if pdir.is_dir() else []:
            if p.name.isascii() and p.name.isdigit():
                ports[int(p.name)] = {a: v for a in ("rate", "state", "phys_state", "link_layer")
                                      if (v := _read(p / a, unreadable)) is not None}
        device = dev / "device"
        netdir = device / "net"
        netdevs = tuple(sorted(n.name for n in netdir.iterdir())) if netdir.is_dir() else ()
        ib.append(IbDevInfo(name=dev.name, busid=_busid_of(device) if device.exists() else None,
                            attrs=attrs, ports=ports, netdevs=netdevs))
    nvme: list[tuple[str, str | None]] = []
    nvme_dir = root / "class" / "nvme"
    for ctrl in sorted(nvme_dir.iterdir()) if nvme_dir.is_dir() else []:
        dev = ctrl / "device"
        nvme.append((ctrl.name, _busid_of(dev) if dev.exists() else None))
    numa: dict[int, str] = {}
    node_dir = root / "devices" / "system" / "node"
    for n in sorted(node_dir.glob("node[0-9]*")) if node_dir.is_dir() else []:
        v = _read(n / "cpulist", unreadable)
        if v is not None and n.name[4:].isascii() and n.name[4:].isdigit():
            numa[int(n.name[4:])] = v
    facts: dict[str, str] = {}
    drv = _read(root / "module" / "nvidia" / "version", unreadable)
    if drv:
        facts["driver"] = drv
    return SysfsTopoSnapshot(root=str(root), pci=tuple(pci), ib=tuple(ib), nvme=tuple(nvme),
                             numa=numa, facts=facts, unreadable=tuple(unreadable))


def read_sysfs_topology(sysfs_root: str | Path = "/sys") -> NodeTopology:
    return topology_from_sysfs(read_sysfs_snapshot(sysfs_root))


def read_capture(path: str | Path) -> NodeTopology:
    """One capture file in any supported format (auto-detected)."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = fh.read(MAX_CAPTURE + 1)
    except FileNotFoundError:
        raise InputError("no such file", str(p)) from None
    except IsADirectoryError:
        raise InputError("is a directory (use --learn DIR for a directory of captures)",
                         str(p)) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", str(p)) from None
    if len(data) > MAX_CAPTURE:
        raise InputError(f"larger than {MAX_CAPTURE} bytes: not a topology capture", str(p))
    if not data.strip():
        raise ParseError("empty file", str(p))
    return parse_topology(data, str(p))


def iter_capture_files(directory: str | Path) -> Iterator[Path]:
    """Regular files under ``directory`` (recursively, sorted); hidden files skipped."""
    d = Path(directory)
    if not d.is_dir():
        raise InputError("not a directory", str(d))
    for dirpath, dirnames, filenames in os.walk(d):
        dirnames[:] = sorted(x for x in dirnames if not x.startswith("."))
        for f in sorted(filenames):
            p = Path(dirpath) / f
            if not f.startswith(".") and p.is_file():  # no FIFOs, sockets or dangling links
                yield p


def read_capture_bytes(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_CAPTURE)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", str(path)) from None


def write_text(path: str | Path, text: str) -> None:
    """Write a generated file (a learned profile); errors name the path."""
    p = Path(path)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write ({exc.strerror or exc})", str(p)) from None


def read_text(path: str | Path, what: str = "file") -> str:
    """A profile or rules file, read bounded (``minutiae.inputs``): /dev/zero is refused."""
    return inputs.read_text(Path(path), limit=MAX_TEXT, what=what)


def run_nvidia_smi_topo(timeout_s: float = 20.0) -> str | None:
    """``nvidia-smi topo -m`` on this node, or None when nvidia-smi is absent or fails."""
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "topo", "-m"], capture_output=True,  # noqa: S603 (argv list)
                             timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.decode("utf-8", errors="replace")

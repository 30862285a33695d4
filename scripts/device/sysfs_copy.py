"""Copy the parts of a live /sys (and /proc) that minutiae reads into DEST, keeping symlinks as
symlinks, so ``--sysfs-root DEST/sys`` replays the node. Standard library only: it runs on a GPU
node that has nothing of minutiae installed.

Usage: python3 sysfs_copy.py DEST

Regular files are read with a size cap (sysfs reports 4096 for every attribute, so tar would pad
them); files that cannot be read (write-only, permission, I/O error) are listed in
DEST/unreadable.txt instead of being copied. Binary and mapping files (config, resource*, rom)
are skipped.
"""

from __future__ import annotations

import glob
import os
import sys

MAX_FILE = 1 << 16
MAX_FILES = 40000
MAX_DEPTH = 14
SKIP = ("config", "rom", "remove", "rescan", "reset", "new_id", "remove_id", "bind", "unbind",
        "uevent_seqnum", "vpd", "driver_override")
SKIP_PREFIX = ("resource",)
# directories below a PCI device that hold nothing minutiae reads and many files
SKIP_DIRS = ("power", "msi_irqs", "wakeup", "statistics_dummy")


class Copier:
    def __init__(self, dest: str) -> None:
        self.dest = dest
        self.files = 0
        self.unreadable: list[str] = []

    def target(self, path: str) -> str:
        return os.path.join(self.dest, path.lstrip("/"))

    def link(self, path: str) -> None:
        out = self.target(path)
        if os.path.lexists(out):
            return
        os.makedirs(os.path.dirname(out), exist_ok=True)
        os.symlink(os.readlink(path), out)

    def file(self, path: str) -> None:
        name = os.path.basename(path)
        if name in SKIP or name.startswith(SKIP_PREFIX) or self.files >= MAX_FILES:
            return
        out = self.target(path)
        if os.path.lexists(out):
            return
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE)
        except OSError as exc:
            self.unreadable.append(f"{path}\t{exc.strerror or exc}")
            return
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as f:
            f.write(data)
        self.files += 1

    def tree(self, path: str, depth: int = 0) -> None:
        if os.path.islink(path):
            self.link(path)
            return
        if os.path.isfile(path):
            self.file(path)
            return
        if not os.path.isdir(path) or depth > MAX_DEPTH:
            return
        os.makedirs(self.target(path), exist_ok=True)
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            self.unreadable.append(f"{path}\t{exc.strerror or exc}")
            return
        for name in names:
            if depth > 0 and name in SKIP_DIRS:
                continue
            self.tree(os.path.join(path, name), depth + 1)


def main(dest: str) -> int:
    c = Copier(dest)
    for pattern in (
        "/sys/bus/pci/devices",
        "/sys/devices/pci*",
        "/sys/class/infiniband", "/sys/class/infiniband_verbs", "/sys/class/net", "/sys/class/nvme",
        "/sys/class/nvme-subsystem", "/sys/class/drm", "/sys/devices/virtual/net",
        "/sys/devices/system/node/online", "/sys/devices/system/node/possible",
        "/sys/devices/system/node/node*/cpulist", "/sys/devices/system/node/node*/cpumap",
        "/sys/devices/system/node/node*/distance", "/sys/devices/system/node/node*/meminfo",
        "/sys/devices/system/cpu/online", "/sys/devices/system/cpu/possible",
        "/sys/devices/system/cpu/present", "/sys/devices/system/cpu/isolated",
        "/sys/devices/system/cpu/cpu*/topology", "/sys/devices/system/cpu/smt",
        "/sys/module/nvidia*/version", "/sys/module/mlx*/version", "/sys/module/ib_*/version",
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/proc/uptime", "/proc/version", "/proc/sys/kernel/tainted", "/proc/cpuinfo", "/proc/meminfo", "/proc/cmdline",
        "/proc/interrupts", "/proc/irq/*/smp_affinity_list", "/proc/irq/*/node",
        "/proc/irq/default_smp_affinity", "/proc/driver/nvidia/version",
        "/proc/driver/nvidia/gpus/*/information", "/proc/driver/nvidia/params",
    ):
        for path in sorted(glob.glob(pattern)):
            c.tree(path)
    with open(os.path.join(dest, "unreadable.txt"), "w") as f:
        f.write("".join(line + "\n" for line in c.unreadable))
    print(f"sysfs_copy: {c.files} files, {len(c.unreadable)} unreadable")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""Reads ``<proc_root>/sys/kernel/tainted`` (the only I/O for the taint source)."""

from __future__ import annotations

from pathlib import Path

from minutiae.model.snapshot import Snapshot
from minutiae.node.sources.read_sysfs import read_small
from minutiae.node.sources.taint.parse import SOURCE, parse_taint


def taint_path(proc_root: Path) -> Path:
    return proc_root / "sys" / "kernel" / "tainted"


def read_taint(proc_root: Path) -> Snapshot:
    """The taint flags of ``proc_root``'s kernel. Raises ``SourceUnavailable`` naming the path
    when the file cannot be read."""
    path = taint_path(proc_root)
    data = read_small(path, 64, SOURCE)
    return parse_taint(data, str(path))

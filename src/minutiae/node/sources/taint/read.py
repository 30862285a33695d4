"""Reads ``<proc_root>/sys/kernel/tainted`` (the only I/O for the taint source)."""

from __future__ import annotations

import os
from pathlib import Path

from minutiae.errors import SourceUnavailable
from minutiae.model.snapshot import Snapshot
from minutiae.node.sources.taint.parse import SOURCE, parse_taint


def taint_path(proc_root: Path) -> Path:
    return proc_root / "sys" / "kernel" / "tainted"


def read_taint(proc_root: Path) -> Snapshot:
    """The taint flags of ``proc_root``'s kernel. Raises ``SourceUnavailable`` naming the path
    when the file cannot be read."""
    path = taint_path(proc_root)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise SourceUnavailable(SOURCE, f"{path}: {exc.strerror or exc}") from None
    try:
        data = os.read(fd, 64)
    except OSError as exc:
        raise SourceUnavailable(SOURCE, f"{path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return parse_taint(data, str(path))

"""Reads a saved ``ibv_devinfo`` capture (the only I/O of the ibv_devinfo source), bounded."""

from __future__ import annotations

from pathlib import Path

from minutiae.inputs import read_text
from minutiae.model.snapshot import Snapshot
from minutiae.node.sources.ibv_devinfo.parse import parse_ibv_devinfo

MAX_BYTES = 4 << 20


def read_ibv_devinfo(path: Path) -> Snapshot:
    """``InputError`` naming the file when it cannot be read, ``ParseError`` when it is not
    ibv_devinfo output."""
    return parse_ibv_devinfo(read_text(path, limit=MAX_BYTES, what="ibv_devinfo capture"), str(path))

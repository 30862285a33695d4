"""Reads a captured ``ibstat`` / ``ibstatus`` output (the IB check of a node that is not this one)."""

from __future__ import annotations

from pathlib import Path

from minutiae.errors import InputError
from minutiae.model.snapshot import Snapshot
from minutiae.node.sources.ib.parse_ibstat import parse_ibstat

MAX_BYTES = 16 * 1024 * 1024


def read_ibstat_file(path: Path) -> Snapshot:
    """Raises ``InputError``/``ParseError`` naming the path."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", str(path)) from None
    if len(data) > MAX_BYTES:
        raise InputError(f"larger than {MAX_BYTES} bytes; not an ibstat capture", str(path))
    return parse_ibstat(data.decode("utf-8", errors="replace"), str(path))

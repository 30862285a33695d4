"""Reads a saved ``perfquery -x`` capture (the only I/O of the perfquery source), bounded."""

from __future__ import annotations

from pathlib import Path

from minutiae.inputs import read_text
from minutiae.model.snapshot import Snapshot
from minutiae.node.sources.perfquery.parse import parse_perfquery

MAX_BYTES = 4 << 20


def read_perfquery(path: Path) -> Snapshot:
    """``InputError`` naming the file when it cannot be read, ``ParseError`` when it is not
    perfquery output."""
    return parse_perfquery(read_text(path, limit=MAX_BYTES, what="perfquery capture"), str(path))

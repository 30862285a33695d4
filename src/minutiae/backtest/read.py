"""Reads the files of a history directory for ``minutiae backtest`` (the only I/O of the
backtest; the root is a parameter). Two layouts:

- a simulated dataset (docs/dataset.md): ``meta.json``, ``fleet.csv``, ``nodes/<node>/kern.log``,
  ``nodes/<node>/ib.csv``, ``maintenance.csv``, ``jobs.csv``, ``truth.jsonl``;
- a recorded controller history: ``reports.jsonl`` (one agent report per line, the JSON the
  agent posts to ``/v1/reports``, with its receive time as ``time`` when the agent gave none),
  optionally ``fleet.csv``, ``maintenance.csv`` and ``jobs.csv`` beside it.

Missing optional files are empty; unreadable or malformed ones raise ``InputError`` naming the path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from minutiae.errors import InputError, ParseError
from minutiae.node.replay import parse_csv

SIMULATED = "simulated"
RECORDED = "recorded"


def layout(root: Path) -> str:
    """Which history ``root`` holds (``simulated`` or ``recorded``); InputError when neither."""
    if not root.is_dir():
        raise InputError("not a directory", str(root))
    if (root / "meta.json").is_file() and (root / "nodes").is_dir():
        return SIMULATED
    if (root / "reports.jsonl").is_file():
        return RECORDED
    raise InputError("neither a simulated dataset (meta.json + nodes/) nor a recorded history "
                     "(reports.jsonl)", str(root))


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", str(path)) from None


def read_meta(root: Path) -> dict[str, Any]:
    path = root / "meta.json"
    try:
        meta = json.loads(_read_text(path))
    except ValueError as exc:
        raise ParseError(f"not JSON: {exc}", str(path)) from None
    if not isinstance(meta, dict):
        raise ParseError("not a JSON object", str(path))
    return meta


def read_csv(root: Path, name: str, required: tuple[str, ...]) -> list[dict[str, str]]:
    """Rows of ``root/name`` as dicts; [] when the file is absent."""
    path = root / name
    if not path.exists():
        return []
    return parse_csv(_read_text(path), str(path), required)


def read_lines(path: Path) -> list[str]:
    """Lines of a text file; [] when absent."""
    if not path.exists():
        return []
    return _read_text(path).splitlines()


def node_dirs(root: Path) -> list[str]:
    nodes = root / "nodes"
    try:
        return sorted(p.name for p in nodes.iterdir() if p.is_dir())
    except OSError as exc:
        raise InputError(f"cannot list: {exc.strerror or exc}", str(nodes)) from None


def read_node(root: Path, node: str) -> tuple[bytes | None, str | None]:
    """``(kern.log bytes, ib.csv text)`` of one simulated node (None when absent)."""
    d = root / "nodes" / node
    kern = ib = None
    try:
        if (d / "kern.log").is_file():
            kern = (d / "kern.log").read_bytes()
        if (d / "ib.csv").is_file():
            ib = (d / "ib.csv").read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", str(d)) from None
    return kern, ib


def iter_reports(root: Path) -> Iterator[tuple[str, int, Any]]:
    """``(where, line number, decoded JSON)`` per non-empty line of ``reports.jsonl``."""
    path = root / "reports.jsonl"
    for i, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            yield str(path), i, json.loads(line)
        except ValueError as exc:
            raise ParseError(f"line {i}: not JSON ({exc})", str(path)) from None

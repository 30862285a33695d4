"""A cache of parsed rule catalogs in the state directory, so a one-shot ``minutiae check``
does not import the TOML parser, parse the catalogs and rerun their examples on every start.

One JSON file, ``<cache_dir>/catalog-cache.json``: per catalog path, the parsed document and
what it was parsed from (the catalog's mtime and size, and those of the code that validates it).
An entry is used only while all of them are unchanged; anything else (no file, damage, a
different layout) is a miss, never an error: the caller parses the catalog and stores it again.
Writes are atomic (temporary file + rename); a cache that cannot be written is simply not used.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

NAME = "catalog-cache.json"
VERSION = 1
MAX_BYTES = 4 << 20


def _stamp(paths: Sequence[Path]) -> list[list[int]] | None:
    try:
        return [[st.st_mtime_ns, st.st_size] for st in (p.stat() for p in paths)]
    except OSError:
        return None


def _read(cache_dir: Path) -> dict[str, Any]:
    try:
        with open(cache_dir / NAME, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
        doc = json.loads(data) if len(data) <= MAX_BYTES else None
    except (OSError, ValueError):
        return {}
    files = doc.get("files") if isinstance(doc, dict) and doc.get("version") == VERSION else None
    return files if isinstance(files, dict) else {}


def load_cached(path: Path, cache_dir: Path, code: Sequence[Path] = ()) -> dict[str, Any] | None:
    """The cached parsed document of ``path``, or None when there is no current entry."""
    stamp = _stamp([path, *code])
    if stamp is None:
        return None
    entry = _read(cache_dir).get(str(path))
    if not isinstance(entry, dict) or entry.get("stamp") != stamp or not isinstance(entry.get("doc"), dict):
        return None
    doc: dict[str, Any] = entry["doc"]
    return doc


def store_cached(path: Path, cache_dir: Path, code: Sequence[Path], doc: Mapping[str, Any]) -> bool:
    """Remember ``doc`` as the parsed form of ``path``; False when it could not be written
    (or the document is not plain JSON data, e.g. TOML dates)."""
    stamp = _stamp([path, *code])
    if stamp is None:
        return False
    files = _read(cache_dir)
    files[str(path)] = {"stamp": stamp, "doc": doc}
    try:
        text = json.dumps({"version": VERSION, "files": files}, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return False
    tmp = cache_dir / f".{NAME}.{os.getpid()}.tmp"
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, cache_dir / NAME)
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        return False
    return True

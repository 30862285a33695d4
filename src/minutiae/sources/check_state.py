"""The small state file of one-shot ``minutiae check`` runs (previous counter values), so that
rates such as "IB symbol errors per hour" work across Slurm HealthCheckProgram runs.

Format (JSON): ``{"version": 1, "time": <epoch>, "values": {"<component>|<metric>": [value, time]}}``.
Written atomically (temporary file + rename). An unreadable or corrupt file is treated as empty
(the rates start again from this run) and reported by the caller, never a crash.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from minutiae.errors import InputError

VERSION = 1
Previous = dict[tuple[str, str], tuple[float, float]]


def load_state(path: Path) -> Previous:
    """Previous values; ``{}`` when the file does not exist. Raises ``InputError`` naming the
    path when it exists but cannot be read or parsed."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise InputError(f"cannot read state file: {exc.strerror or exc}", str(path)) from None
    try:
        doc = json.loads(text)
        values = doc["values"] if doc.get("version") == VERSION else {}
        out: Previous = {}
        for key, pair in values.items():
            comp, _, metric = key.rpartition("|")
            v, t = pair
            if comp and isinstance(v, int | float) and isinstance(t, int | float):
                out[(comp, metric)] = (float(v), float(t))
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"corrupt state file ({exc.__class__.__name__}); starting afresh", str(path)) from None


def save_state(path: Path, values: Mapping[tuple[str, str], tuple[float, float]], now: float) -> None:
    """Write the state atomically. Raises ``InputError`` naming the path on failure."""
    doc = {"version": VERSION, "time": now,
           "values": {f"{c}|{m}": [v, t] for (c, m), (v, t) in sorted(values.items())}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".minutiae-state-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(f"cannot write state file: {exc.strerror or exc}", str(path)) from None

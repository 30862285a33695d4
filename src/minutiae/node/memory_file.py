"""The small state file of ``minutiae check`` (``CheckMemory`` as JSON): previous counter
values (so rates such as "IB symbol errors per hour" work across Slurm HealthCheckProgram runs),
how far the kernel log was read, and the kernel-log findings since boot.

Format: ``{"version": 2, "time": <epoch>, "counters": {"<component>|<metric>": [value, time]},
"kernel_log": {"cursor": {...}, "events": N, "findings": [...]}}``. Written atomically
(temporary file + rename). An unreadable or corrupt file raises ``InputError`` naming the path;
the caller starts afresh and says so, never a crash.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from minutiae.errors import InputError
from minutiae.node.memory import CheckMemory

VERSION = 2
MAX_BYTES = 16 << 20


def load_state(path: Path) -> CheckMemory:
    """The remembered state; empty when the file does not exist."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return CheckMemory()
    except OSError as exc:
        raise InputError(f"cannot read state file: {exc.strerror or exc}", str(path)) from None
    if len(data) > MAX_BYTES:
        raise InputError(f"state file larger than {MAX_BYTES} bytes; starting afresh", str(path))
    try:
        doc = json.loads(data)
        if doc.get("version") != VERSION:
            return CheckMemory()
        return CheckMemory.from_json(doc)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise InputError(f"corrupt state file ({exc.__class__.__name__}); starting afresh", str(path)) from None


def save_state(path: Path, memory: CheckMemory, now: float) -> None:
    """Write the state atomically. Raises ``InputError`` naming the path on failure."""
    doc = {"version": VERSION, "time": now, **memory.to_json()}
    tmp = None
    try:
        # the rename below would put a file where a device, fifo or directory was (``--state-file
        # /dev/zero`` replaced the device node): only a regular file, or nothing, is replaced
        if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
            raise InputError("not a regular file; the state is not written there", str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        # not tempfile: importing it costs more than this whole write (one-shot runs count ms)
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        # json.dumps, not json.dump: only the one-shot form uses the C encoder (~10x faster)
        text = json.dumps(doc, separators=(",", ":"), default=str)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise InputError(f"cannot write state file: {exc.strerror or exc}", str(path)) from None

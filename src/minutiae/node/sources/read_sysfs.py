"""Reading one sysfs or procfs file cheaply (shared by the sysfs and procfs sources)."""

from __future__ import annotations

import os
from pathlib import Path

from minutiae.errors import SourceUnavailable


def read_attr(path: str) -> str | None:
    """The attribute's text, or None when it cannot be read.

    os.open/os.read: a text-mode file object costs ~4x more per small sysfs file (hundreds of
    counters per check); sysfs attributes are at most one page.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def read_small(path: Path, limit: int, source: str) -> bytes:
    """The first ``limit`` bytes of a small kernel file (procfs/sysfs), or ``SourceUnavailable``
    for ``source`` naming the path when it cannot be opened or read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise SourceUnavailable(source, f"{path}: {exc.strerror or exc}") from None
    try:
        return os.read(fd, limit)
    except OSError as exc:
        raise SourceUnavailable(source, f"{path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)

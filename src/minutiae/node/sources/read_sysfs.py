"""Reading one sysfs attribute cheaply (shared by the sysfs sources)."""

from __future__ import annotations

import os


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

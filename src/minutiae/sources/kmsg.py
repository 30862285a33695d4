"""Reads the kernel log for ``minutiae check``: a captured file, or ``/dev/kmsg`` of this node.

``/dev/kmsg`` is read non-blocking, one record per ``read`` (the kernel's interface), from the
start of the ring buffer until no record is left (EAGAIN); a record overwritten while reading
(EPIPE) is skipped. Files are read in 1 MiB chunks. Failures raise ``SourceUnavailable`` naming
the path (e.g. ``Permission denied`` when ``kernel.dmesg_restrict`` forbids it).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

from minutiae.errors import SourceUnavailable

SOURCE = "kernel-log"
CHUNK = 1 << 20
DEV_KMSG = Path("/dev/kmsg")


def _is_char_device(path: Path) -> bool:
    try:
        import stat

        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def read_kernel_log(path: Path) -> list[bytes]:
    """All of the kernel log at ``path`` as byte chunks of whole lines."""
    if _is_char_device(path):
        return list(_read_kmsg(path))
    try:
        with open(path, "rb") as fh:
            chunks: list[bytes] = []
            rest = b""
            while True:
                block = fh.read(CHUNK)
                if not block:
                    break
                block = rest + block
                cut = block.rfind(b"\n") + 1
                if cut == 0:
                    rest = block
                    continue
                chunks.append(block[:cut])
                rest = block[cut:]
            if rest:
                chunks.append(rest + b"\n")
            return chunks
    except OSError as exc:
        raise SourceUnavailable(SOURCE, f"{path}: {exc.strerror or exc}") from None


def _read_kmsg(path: Path) -> Iterator[bytes]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise SourceUnavailable(SOURCE, f"{path}: {exc.strerror or exc}") from None
    records: list[bytes] = []
    try:
        while True:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # overwritten while we read: skip to the next record
                if exc.errno == errno.EINVAL:
                    continue
                raise SourceUnavailable(SOURCE, f"{path}: {exc.strerror or exc}") from None
            if not rec:
                break
            records.append(rec if rec.endswith(b"\n") else rec + b"\n")
            if len(records) >= 4096:
                yield b"".join(records)
                records = []
    finally:
        os.close(fd)
    if records:
        yield b"".join(records)

"""Reads the kernel log for ``minutiae check`` and ``minutiae logscan``: a captured file, ``-``
(standard input), or ``/dev/kmsg`` of this node (path injectable).

Bytes are returned as they are: decoding (UTF-8 with replacement, so binary garbage, NULs,
1 MB lines and mixed encodings never crash) is the parser's job
(:func:`minutiae.parsers.kernel_log.parse_chunks`). :func:`iter_kernel_log` streams (bounded
memory for multi-GB logs); :func:`read_kernel_log` returns the chunks as a list.

``/dev/kmsg`` is read non-blocking, one record per ``read`` (the kernel's interface), from the
start of the ring buffer until no record is left (EAGAIN); a record overwritten while reading
(EPIPE) is skipped. Files are read in 1 MiB chunks. Failures raise ``SourceUnavailable`` naming
the path (e.g. ``Permission denied`` when ``kernel.dmesg_restrict`` forbids it).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

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


STDIN = "-"


def iter_kernel_log(path: str | Path, *, stdin: BinaryIO | None = None) -> Iterator[bytes]:
    """Stream the kernel log at ``path`` (``-``: ``stdin``, default the process's standard
    input) as byte chunks. Raises ``SourceUnavailable`` naming the path when it cannot be read."""
    if str(path) == STDIN:
        stream = stdin if stdin is not None else sys.stdin.buffer
        yield from _read_stream(stream, "<stdin>")
        return
    p = Path(path)
    if _is_char_device(p):
        yield from _read_kmsg(p)
        return
    try:
        fh = open(p, "rb")  # noqa: SIM115 - closed below; errors must name the path
    except OSError as exc:
        raise SourceUnavailable(SOURCE, f"{p}: {exc.strerror or exc}") from None
    with fh:
        yield from _read_stream(fh, str(p))


def _read_stream(fh: BinaryIO, name: str) -> Iterator[bytes]:
    while True:
        try:
            block = fh.read(CHUNK)
        except OSError as exc:
            raise SourceUnavailable(SOURCE, f"{name}: {exc.strerror or exc}") from None
        if not block:
            return
        yield block


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
                if exc.errno == errno.EINVAL:  # record larger than the buffer: cannot advance
                    break
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

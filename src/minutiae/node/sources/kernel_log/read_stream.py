"""Streams a kernel log for ``minutiae logscan``: a file (in 1 MiB chunks, bounded memory for
multi-GB logs), ``-`` (standard input), or a character device such as ``/dev/kmsg`` (read
through :func:`minutiae.node.sources.kernel_log.read_kmsg.read_kernel_log`, non-blocking, whole ring buffer).

Bytes are returned as they are; decoding (UTF-8 with replacement: binary garbage, NULs, 1 MB
lines and mixed encodings never crash) is the parser's job
(:func:`minutiae.node.sources.kernel_log.parse.parse_chunks`). Failures raise ``SourceUnavailable``
naming the path.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from minutiae.errors import SourceUnavailable

SOURCE = "kernel-log"
CHUNK = 1 << 20
STDIN = "-"
DEV_KMSG = Path("/dev/kmsg")


def iter_kernel_log(path: str | Path, *, stdin: BinaryIO | None = None) -> Iterator[bytes]:
    """Stream the kernel log at ``path`` (``-``: ``stdin``, default the process's standard
    input) as byte chunks."""
    if str(path) == STDIN:
        yield from _read_stream(stdin if stdin is not None else sys.stdin.buffer, "<stdin>")
        return
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise SourceUnavailable(SOURCE, f"{p}: {exc.strerror or exc}") from None
    if stat.S_ISCHR(st.st_mode):
        from minutiae.node.sources.kernel_log.read_kmsg import read_kernel_log

        chunks, _, _ = read_kernel_log(p)
        yield from chunks
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


class KernelLogTail:
    """Follows a kernel log from its current end (the agent's follow thread): ``poll`` returns
    the whole lines written since the previous call, non-blocking, at most ``max_bytes`` of them
    (the rest are skipped and counted in ``skipped_bytes``: the interval check still reads them
    through its cursor). A file that shrinks or is replaced is followed from its new start;
    ``/dev/kmsg`` is opened non-blocking at the end of its ring buffer."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.skipped_bytes = 0
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._rest = b""
        self._open(at_end=True)

    def _open(self, at_end: bool) -> None:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise SourceUnavailable(SOURCE, f"{self.path}: {exc.strerror or exc}") from None
        self._ident = (st.st_dev, st.st_ino)
        if stat.S_ISCHR(st.st_mode):
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
                os.lseek(self._fd, 0, os.SEEK_END)  # /dev/kmsg: only records from now on
            except OSError as exc:
                raise SourceUnavailable(SOURCE, f"{self.path}: {exc.strerror or exc}") from None
        else:
            self._offset = st.st_size if at_end else 0
            self._rest = b""

    def wait(self, timeout_s: float) -> None:
        """Block until ``/dev/kmsg`` has a new record or ``timeout_s`` passes (no CPU while
        idle); a file has no readiness to wait on, so this sleeps ``timeout_s``."""
        if self._fd is None:
            time.sleep(timeout_s)
            return
        try:
            select.select([self._fd], [], [], timeout_s)
        except (OSError, ValueError):
            time.sleep(timeout_s)

    @property
    def waits_for_data(self) -> bool:
        return self._fd is not None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def poll(self, max_bytes: int = 1 << 16) -> bytes:
        """New whole lines (``b""`` when none)."""
        if self._fd is not None:
            return self._poll_kmsg(max_bytes)
        try:
            st = os.stat(self.path)
        except OSError:
            return b""  # rotated away: the next poll finds the new file
        if (st.st_dev, st.st_ino) != self._ident or st.st_size < self._offset:
            self._ident, self._offset, self._rest = (st.st_dev, st.st_ino), 0, b""
        if st.st_size == self._offset:
            return b""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                block = fh.read(max_bytes)
        except OSError:
            return b""
        self._offset += len(block)
        if st.st_size > self._offset:  # a flood: skip to the end, counted
            self.skipped_bytes += st.st_size - self._offset
            self._offset, block = st.st_size, block + b"\n"
        block = self._rest + block
        cut = block.rfind(b"\n") + 1
        self._rest = block[cut:][-8192:]
        return block[:cut]

    def _poll_kmsg(self, max_bytes: int) -> bytes:
        assert self._fd is not None
        out: list[bytes] = []
        size = 0
        while True:
            try:
                rec = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EINVAL):
                    continue
                return b"".join(out)
            if not rec:
                break
            if size >= max_bytes:
                self.skipped_bytes += len(rec)
                continue
            out.append(rec if rec.endswith(b"\n") else rec + b"\n")
            size += len(rec)
        return b"".join(out)

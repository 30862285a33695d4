"""Streams a kernel log for ``minutiae logscan``: a file (in 1 MiB chunks, bounded memory for
multi-GB logs), ``-`` (standard input), or a character device such as ``/dev/kmsg`` (read
through :func:`minutiae.node.sources.kernel_log.read_kmsg.read_kernel_log`, non-blocking, whole ring buffer).

Bytes are returned as they are; decoding (UTF-8 with replacement: binary garbage, NULs, 1 MB
lines and mixed encodings never crash) is the parser's job
(:func:`minutiae.node.sources.kernel_log.parse.parse_chunks`). Failures raise ``SourceUnavailable``
naming the path.
"""

from __future__ import annotations

import os
import stat
import sys
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

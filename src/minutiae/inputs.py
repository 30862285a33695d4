"""The one bounded reader for every file a user hands minutiae (issue 16).

Every command and source reads its inputs through here, so a hostile input is refused the same
way everywhere, with one line naming the file:

* a directory where a file is expected, or a path that does not exist: :class:`InputError`;
* a regular file larger than the caller's ``limit``: refused from its size, before any byte is
  read (a 2 GB sparse file costs nothing);
* a fifo, character device or socket (``/dev/zero``, a pipe that never ends): read up to
  ``min(limit, STREAM_LIMIT)`` bytes and refused past it, so memory stays bounded (a regular
  file's size is known up front; a stream's is not, so it gets the smaller cap);
* binary data (NUL bytes in the first block): refused up front, unless the caller says the format
  is binary (Parquet).

:func:`iter_lines` streams text line by line for inputs that may be larger than memory (kernel
logs): each line is capped at ``max_line`` bytes (the rest is counted, not kept), so an endless
input without newlines holds at most one capped line.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from minutiae.errors import InputError

__all__ = ["BINARY_PROBE", "MAX_NO_NEWLINE", "STREAM_LIMIT", "LineStats", "check_path", "iter_lines", "read_bounded", "read_text"]

#: bytes inspected for NUL bytes before a text input is accepted
BINARY_PROBE = 64 * 1024
#: bytes without a line end after which a line-oriented input is not text (an endless stream)
MAX_NO_NEWLINE = 64 << 20
_CHUNK = 1 << 20
#: bytes read at most from a fifo, device or socket, whatever ``limit`` a caller allows a file
STREAM_LIMIT = 64 << 20


def check_path(path: Path, what: str) -> os.stat_result:
    """``path``'s stat result, or :class:`InputError` when it is missing or a directory."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"no such {what}", str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}", str(path)) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"is a directory, expected a {what}", str(path))
    return st


def read_bounded(path: Path, *, limit: int, what: str, binary: bool = False,
                 magic: bytes = b"") -> bytes:
    """The whole of ``path`` (at most ``limit`` bytes), refused with one clear line otherwise.
    ``magic``: binary data is allowed when the file starts with it (Parquet's ``PAR1``), else
    refused from the first block like any text input."""
    st = check_path(path, what)
    if not stat.S_ISREG(st.st_mode):
        limit = min(limit, STREAM_LIMIT)
    elif st.st_size > limit:
        raise InputError(f"{st.st_size} bytes is larger than the {limit}-byte limit for a {what}",
                         str(path))
    try:
        with open(path, "rb") as fh:
            head = fh.read(BINARY_PROBE)
            allowed = binary or (magic and head.startswith(magic))
            if not allowed and b"\0" in head:
                raise InputError(f"binary data (NUL bytes), not a {what}", str(path))
            parts = [head]
            got = len(head)
            while head and got <= limit:   # chunks: read(n) would allocate n bytes up front
                part = fh.read(min(_CHUNK, limit + 1 - got))
                if not part:
                    break
                parts.append(part)
                got += len(part)
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}", str(path)) from None
    data = b"".join(parts)
    if len(data) > limit:
        raise InputError(f"more than the {limit}-byte limit for a {what} (an endless stream?)",
                         str(path))
    return data


def read_text(path: Path, *, limit: int, what: str) -> str:
    """:func:`read_bounded` decoded as UTF-8, or :class:`InputError` naming the byte offset."""
    data = read_bounded(path, limit=limit, what=what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text at byte {exc.start}; not a {what}", str(path)) from None


@dataclass
class LineStats:
    """What :func:`iter_lines` had to cut: over-long lines and their dropped bytes."""

    lines: int = 0
    long_lines: int = 0
    dropped_bytes: int = 0
    first_long_line: int | None = field(default=None)


def iter_lines(path: Path, *, max_line: int, what: str, stats: LineStats | None = None,
               chunk: int = _CHUNK) -> Iterator[bytes]:
    """Lines of ``path`` (without the newline), each capped at ``max_line`` bytes.

    Memory is bounded by ``chunk + max_line`` whatever the input: an over-long line yields its
    first ``max_line`` bytes, and the rest up to its newline is counted in ``stats``. Binary data
    in the first block is refused like :func:`read_bounded` does.
    """
    check_path(path, what)
    s = stats if stats is not None else LineStats()
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed in the finally below
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}", str(path)) from None
    try:
        yield from _lines(fh, max_line, what, str(path), s, chunk)
    finally:
        fh.close()


def _lines(fh: BinaryIO, max_line: int, what: str, where: str, s: LineStats,
           chunk: int) -> Iterator[bytes]:
    read = fh.read
    buf = b""
    skipping = False
    first = True
    while True:
        data: bytes = read(chunk)
        if first:
            first = False
            if b"\0" in data[:BINARY_PROBE]:
                raise InputError(f"binary data (NUL bytes), not a {what}", where)
        if not data:
            break
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            piece = data[start:nl]
            if skipping:
                s.dropped_bytes += len(piece)
                skipping = False
            else:
                line = buf + piece
                buf = b""
                if len(line) > max_line:
                    _long(s, len(line) - max_line)
                    line = line[:max_line]
                s.lines += 1
                yield line
            start = nl + 1
        tail = data[start:]
        if skipping:
            s.dropped_bytes += len(tail)
        elif len(buf) + len(tail) > max_line:
            line = (buf + tail)[:max_line]
            _long(s, len(buf) + len(tail) - max_line)
            buf = b""
            skipping = True
            s.lines += 1
            yield line
        else:
            buf += tail
    if buf:
        s.lines += 1
        yield buf


def _long(s: LineStats, dropped: int) -> None:
    s.long_lines += 1
    s.dropped_bytes += dropped
    if s.first_long_line is None:
        s.first_long_line = s.lines + 1

"""Reads the kernel log for ``minutiae check``: a captured file, or ``/dev/kmsg`` of this node,
from where the previous cycle stopped (a *cursor*), so a cycle parses only new lines.

- Files are read from the cursor's byte offset when the file is the same (device, inode) and
  has not shrunk; otherwise from the start, and ``reset`` is true (rotated or replaced log).
- ``/dev/kmsg`` is read non-blocking, one record per ``read`` (the kernel's interface), from the
  start of the ring buffer until EAGAIN; records up to the cursor's sequence number are skipped;
  a record overwritten while reading (EPIPE) is skipped. A new boot id (reboot) resets.

Failures raise ``SourceUnavailable`` naming the path (e.g. ``Permission denied`` when
``kernel.dmesg_restrict`` forbids it). Cursors are plain JSON objects (kept in the state file).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from minutiae.errors import SourceUnavailable
from minutiae.inputs import BINARY_PROBE, MAX_NO_NEWLINE

SOURCE = "kernel-log"
CHUNK = 1 << 20
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _boot_id(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def read_kernel_log(
    path: Path, cursor: dict[str, Any] | None = None, boot_id_path: Path = BOOT_ID
) -> tuple[list[bytes] | Iterator[bytes], dict[str, Any], bool]:
    """``(chunks of whole lines, new cursor, reset)`` for the part of the log after ``cursor``:
    a list from /dev/kmsg (the ring buffer is bounded), a stream from a file (an empty list
    when nothing is new); reading the stream may raise ``SourceUnavailable`` too."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise SourceUnavailable(SOURCE, f"{path}: {exc.strerror or exc}") from None
    if stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 11):
        return _read_kmsg(path, cursor, _boot_id(boot_id_path))
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):   # /dev/zero would never end
        raise SourceUnavailable(SOURCE, f"{path}: a device is not a kernel log (only /dev/kmsg "
                                        "is read)")
    return _read_file(path, st, cursor)


def _read_file(path: Path, st: os.stat_result, cursor: dict[str, Any] | None,
               ) -> tuple[list[bytes] | Iterator[bytes], dict[str, Any], bool]:
    """The file from the cursor to its size at ``st``, streamed: chunks of whole lines read as
    they are consumed (memory stays one chunk whatever the file's size; lines appended after
    ``st`` are the next cycle's). An empty list when nothing is new."""
    same = (
        cursor is not None and cursor.get("path") == str(path) and cursor.get("dev") == st.st_dev
        and cursor.get("ino") == st.st_ino and isinstance(cursor.get("offset"), int)
        and 0 <= cursor["offset"] <= st.st_size
    )
    offset = int(cursor["offset"]) if same and cursor is not None else 0
    new = {"path": str(path), "dev": st.st_dev, "ino": st.st_ino, "offset": st.st_size}
    if offset >= st.st_size:
        return [], new, not same
    try:
        fh = open(path, "rb")  # noqa: SIM115 - the generator closes it
        fh.seek(offset)
        first = fh.read(min(CHUNK, st.st_size - offset))
    except OSError as exc:
        raise SourceUnavailable(SOURCE, f"{path}: {exc.strerror or exc}") from None
    try:
        _text_or_refuse(path, first[:BINARY_PROBE])
    except SourceUnavailable:
        fh.close()
        raise
    return _chunks(path, fh, first, st.st_size - offset - len(first)), new, not same


def _chunks(path: Path, fh: BinaryIO, first: bytes, left: int) -> Iterator[bytes]:
    """Whole-line chunks from ``first`` and the next ``left`` bytes of ``fh`` (closed at the end);
    a last line without its end is completed."""
    rest = b""
    block = first
    with fh:
        while block:
            block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                if len(block) > MAX_NO_NEWLINE:  # bounded memory: an endless line is no log
                    raise SourceUnavailable(SOURCE, f"{path}: no line end in "
                                                    f"{MAX_NO_NEWLINE >> 20} MiB: not a text log")
                rest = block
            else:
                yield block[:cut]
                rest = block[cut:]
            try:
                block = fh.read(min(CHUNK, left)) if left > 0 else b""
            except OSError as exc:
                raise SourceUnavailable(SOURCE, f"{path}: {exc.strerror or exc}") from None
            left -= len(block)
    if rest:
        yield rest + b"\n"


def _text_or_refuse(path: Path, head: bytes) -> None:
    """A file whose first 64 KiB hold NUL bytes and no line end (a sparse or binary file) is
    not a kernel log (logscan says the same)."""
    if b"\0" in head and b"\n" not in head:
        raise SourceUnavailable(SOURCE, f"{path}: binary data (NUL bytes, no line ends), not a "
                                        "kernel log")


def _seq(record: bytes) -> int:
    """The sequence number of a /dev/kmsg record ``pri,seq,usec,flags;msg`` (-1 if absent)."""
    head = record.split(b";", 1)[0].split(b",")
    try:
        return int(head[1])
    except (IndexError, ValueError):
        return -1


def _read_kmsg(path: Path, cursor: dict[str, Any] | None, boot: str | None) -> tuple[list[bytes], dict[str, Any], bool]:
    same = (cursor is not None and cursor.get("path") == str(path) and boot is not None
            and cursor.get("boot_id") == boot and isinstance(cursor.get("seq"), int))
    last = int(cursor["seq"]) if same and cursor is not None else -1
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise SourceUnavailable(SOURCE, f"{path}: {exc.strerror or exc}") from None
    records: list[bytes] = []
    chunks: list[bytes] = []
    newest = last
    try:
        while True:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EINVAL):
                    continue  # overwritten while we read / oversized: skip to the next record
                raise SourceUnavailable(SOURCE, f"{path}: {exc.strerror or exc}") from None
            if not rec:
                break
            seq = _seq(rec)
            if seq <= last and seq >= 0:
                continue
            newest = max(newest, seq)
            records.append(rec if rec.endswith(b"\n") else rec + b"\n")
            if len(records) >= 4096:
                chunks.append(b"".join(records))
                records = []
    finally:
        os.close(fd)
    if records:
        chunks.append(b"".join(records))
    return chunks, {"path": str(path), "boot_id": boot, "seq": newest}, not same

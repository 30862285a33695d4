"""The bounded reader: hostile files are refused in one line and memory stays bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minutiae.errors import InputError
from minutiae.inputs import LineStats, iter_lines, read_bounded, read_text
from peak_rss import peak_kib, reset_peak


def test_a_regular_file_within_the_limit_is_read_whole(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_bytes(b"rank,step,time\n0,0,1.0\n")
    assert read_bounded(f, limit=100, what="timing file") == b"rank,step,time\n0,0,1.0\n"


def test_a_large_sparse_file_is_refused_from_its_size_without_reading(tmp_path: Path) -> None:
    f = tmp_path / "sparse.csv"
    with open(f, "wb") as fh:
        fh.truncate(2 << 30)  # 2 GiB of holes: reading it would cost 2 GiB
    reset_peak()
    before = peak_kib()
    with pytest.raises(InputError, match="larger than the 1048576-byte limit"):
        read_bounded(f, limit=1 << 20, what="timing file")
    assert peak_kib() - before < 50_000  # KiB


def test_dev_zero_is_refused_as_binary_with_bounded_memory() -> None:
    with pytest.raises(InputError, match="binary data"):
        read_bounded(Path("/dev/zero"), limit=1 << 20, what="timing file")
    with pytest.raises(InputError, match="binary data"):
        next(iter_lines(Path("/dev/zero"), max_line=4096, what="kernel log"))


def test_an_endless_text_stream_stops_at_the_limit(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    pid = os.fork()
    if pid == 0:  # the writer: more than the limit, then it is killed by the pipe closing
        try:
            with open(fifo, "wb") as fh:
                while True:
                    fh.write(b"x" * 65536)
        finally:
            os._exit(0)
    try:
        with pytest.raises(InputError, match="endless stream"):
            read_bounded(fifo, limit=1 << 20, what="timing file")
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_a_directory_and_a_missing_file_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        read_bounded(tmp_path, limit=10, what="policy file")
    with pytest.raises(InputError, match="no such policy file"):
        read_bounded(tmp_path / "nope.toml", limit=10, what="policy file")


def test_non_utf8_text_names_the_byte(tmp_path: Path) -> None:
    f = tmp_path / "x.toml"
    f.write_bytes(b"abc\xff")
    with pytest.raises(InputError, match="byte 3"):
        read_text(f, limit=100, what="policy file")


def test_over_long_lines_are_capped_and_counted(tmp_path: Path) -> None:
    f = tmp_path / "kern.log"
    f.write_bytes(b"short\n" + b"y" * 10_000 + b"\nafter\n" + b"z" * 50)
    stats = LineStats()
    lines = list(iter_lines(f, max_line=100, what="kernel log", stats=stats, chunk=1024))
    assert lines == [b"short", b"y" * 100, b"after", b"z" * 50]
    assert stats.long_lines == 1 and stats.dropped_bytes == 9_900 and stats.first_long_line == 2


@given(st.lists(st.binary(max_size=300).filter(lambda b: b"\n" not in b and b"\0" not in b),
                max_size=30), st.integers(1, 64), st.integers(1, 400))
def test_lines_match_splitlines_within_the_cap(parts: list[bytes], chunk: int, cap: int) -> None:
    """Whatever the chunking, the lines are the file's lines, each cut to ``cap`` bytes."""
    import tempfile
    with tempfile.NamedTemporaryFile() as fh:
        fh.write(b"\n".join(parts))
        fh.flush()
        got = list(iter_lines(Path(fh.name), max_line=cap, what="log", chunk=chunk))
    want = [p[:cap] for p in b"\n".join(parts).split(b"\n")] if parts else []
    if want and want[-1] == b"":
        want.pop()
    assert got == want

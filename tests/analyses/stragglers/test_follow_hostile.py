"""``stragglers --follow`` on hostile files: a device, a directory, a line without end. On main
``CsvTail.read`` read everything past its offset at once, so /dev/zero was a MemoryError
traceback and a line without end grew without bound; now it reads regular files only, at most
``FOLLOW_CHUNK`` bytes per call, and refuses a line longer than ``MAX_NO_NEWLINE``."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.analyses.stragglers import read
from minutiae.analyses.stragglers.read import CsvTail
from minutiae.cli.main import main
from minutiae.errors import InputError
from minutiae.inputs import MAX_NO_NEWLINE
from minutiae.testing.limits import memory_cap


def test_a_device_or_a_directory_is_refused(tmp_path: Path) -> None:
    with memory_cap(), pytest.raises(InputError, match="/dev/zero: not a regular file"):
        CsvTail(Path("/dev/zero")).read()  # main: a MemoryError, not the machine
    with pytest.raises(InputError, match="is a directory"):
        CsvTail(tmp_path).read()


def test_a_line_without_end_is_refused_past_the_cap(tmp_path: Path) -> None:
    p = tmp_path / "holes.csv"
    with open(p, "wb") as fh:
        fh.truncate(MAX_NO_NEWLINE + (1 << 20))   # zeros, no newline: costs no disk
    tail = CsvTail(p)
    with pytest.raises(InputError, match="no line end"):
        for _ in range(MAX_NO_NEWLINE // read.FOLLOW_CHUNK + 2):
            assert tail.read() == b""


def test_a_large_append_is_read_in_chunks_without_losing_a_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read, "FOLLOW_CHUNK", 10)
    p = tmp_path / "t.csv"
    rows = [f"{s},0,1.{s}\n" for s in range(20)]
    p.write_text("step,rank,seconds\n" + "".join(rows))
    tail = CsvTail(p)
    got = b"".join(tail.read() for _ in range(60))
    assert tail.header == "step,rank,seconds"
    assert got.decode() == "".join(rows)


def test_follow_dev_zero_is_one_line_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    with memory_cap():
        rc = main(["stragglers", "--follow", "--idle-exit", "1", "/dev/zero"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3 and err == ["minutiae: error: /dev/zero: not a regular file: --follow reads "
                               "a growing CSV file"], err

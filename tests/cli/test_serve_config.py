"""``serve --config FILE`` / ``$MINUTIAE_CONFIG`` are read bounded: an endless or binary file is
one line, exit 3, before anything starts (on main /dev/zero was read whole: a MemoryError
traceback)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from minutiae.cli.main import main
from minutiae.testing.limits import memory_cap


@pytest.fixture
def capped() -> Iterator[None]:
    with memory_cap():  # main: a MemoryError, not the machine
        yield


@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_endless_config_is_one_line_exit_3(capped: None, how: str,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("MINUTIAE_TOKEN", raising=False)
    if how == "env":
        monkeypatch.setenv("MINUTIAE_CONFIG", "/dev/zero")
    argv = ["serve", "--config", "/dev/zero"] if how == "flag" else ["serve"]
    assert main(argv) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith("minutiae: error: /dev/zero: cannot read config")


def test_a_binary_config_is_refused_naming_it(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "minutiae.toml"
    p.write_bytes(b"[controller]\x00\xff\xfe")
    assert main(["serve", "--config", str(p)]) == 3
    assert f"{p}: cannot read config: binary data" in capsys.readouterr().err

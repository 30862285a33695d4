"""Token files and $MINUTIAE_TOKEN (agent, serve, pause, unpause, resolve, jobs): an endless file
is refused after a bounded read and a token an HTTP header cannot carry is one line, exit 3 (on
main: /dev/zero was read whole, a MemoryError; a BOM or a second line went into httpx's header
encoding, a UnicodeEncodeError traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.cli.main import main
from minutiae.cli.tokens import read_only_token, read_token
from minutiae.errors import ConfigError
from minutiae.testing.limits import memory_cap

GOOD = "fuzz-token-0123456789abc"


@pytest.mark.parametrize("text", [
    "\ufeffé" + GOOD, GOOD + "\nsecond-line", "two words here", "tok\x00en", "ü" * 20,
], ids=["non-ascii", "two-lines", "spaces", "nul", "umlauts"])
def test_a_token_no_header_can_carry_is_a_config_error(tmp_path: Path, text: str) -> None:
    p = tmp_path / "tok"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="printable ASCII|binary data"):
        read_token(str(p))


def test_a_bom_and_the_line_end_are_not_part_of_the_token(tmp_path: Path) -> None:
    p = tmp_path / "tok"
    p.write_text("\ufeff" + GOOD + "\r\n", encoding="utf-8")
    assert read_token(str(p)) == GOOD


def test_an_endless_token_file_is_refused_bounded() -> None:
    with memory_cap(), pytest.raises(ConfigError, match="/dev/zero: cannot read token"):
        read_token("/dev/zero")  # main: a MemoryError, not the machine


def test_the_environment_tokens_are_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINUTIAE_TOKEN", "a\nb")
    with pytest.raises(ConfigError, match=r"\$MINUTIAE_TOKEN"):
        read_token(None)
    monkeypatch.setenv("MINUTIAE_TOKEN", GOOD)
    monkeypatch.setenv("MINUTIAE_READ_TOKEN", "ré")
    with pytest.raises(ConfigError, match=r"\$MINUTIAE_READ_TOKEN"):
        read_only_token()


@pytest.mark.parametrize("argv", [
    ["unpause"], ["pause", "--reason", "x"], ["resolve", "gpu001", "--reason", "x"],
])
def test_fleet_commands_exit_3_on_a_hostile_token_file(tmp_path: Path, argv: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "tok"
    p.write_text("\ufeff" + "é" + GOOD, encoding="utf-8")
    assert main([*argv, "--controller", "http://127.0.0.1:1", "--token-file", str(p)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("minutiae: error:"), err

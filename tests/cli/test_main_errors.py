"""Unreadable inputs are UNKNOWN (exit 3, one line), never click's usage error (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.cli.main import EXIT_ERROR, main


@pytest.mark.parametrize("argv", [
    ["logscan", "--rules", "{dir}", "{log}"],          # a directory where a file is expected
    ["backtest", "{dir}", "--policy", "{dir}"],        # the same for --policy
    ["regress", "--rollouts", "{dir}/missing.csv", "--runs", "{dir}/missing.parquet"],
])
def test_an_unreadable_file_option_exits_3_with_one_line(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    args = [a.format(dir=tmp_path, log=log) for a in argv]
    assert main(args) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("minutiae: error:"), err


def test_a_usage_error_is_still_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logscan", "--no-such-option"]) == 2
    assert "no such option" in capsys.readouterr().err.lower()

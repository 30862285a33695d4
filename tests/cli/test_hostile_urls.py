"""A URL option with a control character (a newline pasted into --controller, --prom,
--prometheus, --dcgm) is one line naming it, never httpx's InvalidURL traceback (InvalidURL is
not an httpx.HTTPError, so the clients' unreachable handlers missed it: each case below was a
traceback on main)."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.cli.main import main

URL = "http://ctl:8470\nX-Injected: 1"
CASES = [
    ["status", "--controller", URL], ["nodes", "--controller", URL],
    ["explain", "gpu001", "--controller", URL],
    ["regress", "--prom", URL], ["whatchanged", "a", "b", "--prom", URL],
    ["impact", "--speedup", "1%", "--where", "NCCL>=2.21", "--prom", URL],
    ["slownodes", "--prometheus", URL],
]


@pytest.mark.parametrize("argv", CASES, ids=[a[0] for a in CASES])
def test_a_url_with_a_newline_is_one_line_exit_3(argv: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("minutiae: error:"), err
    assert "\\n" in err[0]   # the URL is named, its newline shown, not printed


def test_check_dcgm_url_with_a_newline_is_an_unknown_source(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "kmsg"
    empty.write_text("")
    rc = main(["check", "--no-nvml", "--kmsg", str(empty), "--dcgm", URL, "--json"])
    out = capsys.readouterr().out
    assert rc in (0, 1, 3) and "InvalidURL" in out and "Traceback" not in out

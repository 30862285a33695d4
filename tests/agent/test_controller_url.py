"""``agent --controller`` with a control character is refused at start, one line, exit 3. On
main the agent started and every cycle failed with httpx's InvalidURL ('check cycle failed'),
for ever, exit 0 after --cycles."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.cli.main import main


@pytest.mark.parametrize("url", ["http://ctl:8470\nX: y", "http://a:8470,http://b\r:8470"])
def test_a_controller_url_with_a_control_character_is_refused_at_start(
        url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kmsg, tok = tmp_path / "kmsg", tmp_path / "tok"
    kmsg.write_text("")
    tok.write_text("fuzz-token-0123456789abc\n")
    rc = main(["agent", "--controller", url, "--token-file", str(tok), "--cycles", "1",
               "--no-follow", "--metrics-listen", "", "--state-dir", str(tmp_path / "st"),
               "--no-nvml", "--kmsg", str(kmsg)])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("minutiae: error")]
    assert rc == 3 and len(err) == 1 and "--controller" in err[0], err

"""``agent --metrics-listen`` with a port or host nothing can bind is one line, exit 3, before the
first cycle. On main a 20-digit port was an OverflowError, a Unicode digit a ValueError from
int() and a host label over 63 characters IDNA's UnicodeError: tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.cli.main import main


@pytest.mark.parametrize("listen", ["127.0.0.1:12345678901234567890", "127.0.0.1:\u00b2",
                                    "127.0.0.1:65536", "a" * 70 + ".example:0"],
                         ids=["20-digit-port", "unicode-digit", "port-65536", "long-label"])
def test_an_unbindable_metrics_address_is_one_line_exit_3(
        listen: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    rc = main(["agent", "--cycles", "1", "--no-follow", "--metrics-listen", listen, "--state-dir",
               str(tmp_path / "st"), "--no-nvml", "--kmsg", str(kmsg)])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("minutiae: error")]
    assert rc == 3 and len(err) == 1 and "--metrics-listen" in err[0], err

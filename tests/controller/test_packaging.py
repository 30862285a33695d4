"""Bare-metal packaging: the systemd units pass `systemd-analyze verify` (when it is installed),
and `serve` reads /etc/minutiae/minutiae.toml-style config ([controller]) with flags winning."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from minutiae.testing.serve import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze not installed (apt-get install systemd)")
@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_units_verify(unit: Path, tmp_path: Path) -> None:
    # verify checks that ExecStart's program exists: point it at this checkout's minutiae
    exe = Path(sys.executable).with_name("minutiae")
    text = unit.read_text()
    assert "ExecStart=/usr/local/bin/minutiae " in text
    copy = tmp_path / unit.name
    copy.write_text(text.replace("/usr/local/bin/minutiae", str(exe)))
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", str(copy)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert "Unknown" not in res.stderr and "ignoring" not in res.stderr, res.stderr


def test_units_are_there() -> None:
    assert [u.name for u in UNITS] == ["minutiae-agent.service", "minutiae-controller.service"]


def test_serve_reads_the_config_file_and_flags_override_it(tmp_path: Path) -> None:
    cfg = tmp_path / "minutiae.toml"
    cfg.write_text('[controller]\nbackend = "dry-run"\ncluster = "site"\n'
                   'controller_id = "from-file"\ninterval = 0.5\n')
    token = "config-token-0123456789abcdef"
    with ServeProcess(tmp_path / "a", token, "--config", str(cfg)) as p:
        st = httpx.get(f"{p.url}/v1/status", timeout=5).json()
        assert st["identity"] == "site/from-file" and st["scheduler"] == "dry-run"
    with ServeProcess(tmp_path / "b", token, "--config", str(cfg), "--controller-id", "flag") as p:
        assert httpx.get(f"{p.url}/v1/status", timeout=5).json()["identity"] == "site/flag"

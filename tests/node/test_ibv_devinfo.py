"""The ibv_devinfo source (issue 16 item 4): real ``ibv_devinfo`` blocks from public threads
(tests/data/infiniband_tools/README.md) → ``ib:<hca>/<port>`` state/MTU/link layer, judged by the
``ib.*`` rules; one folder + one registry line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minutiae.cli.main import main
from minutiae.node.sources.ibv_devinfo.parse import parse_ibv_devinfo
from minutiae.node.sources.registry import REGISTRY

DATA = Path(__file__).resolve().parents[1] / "data" / "infiniband_tools"


def test_real_blocks() -> None:
    s = parse_ibv_devinfo((DATA / "ibv_devinfo-deepep60.txt").read_text())
    p = "ib:mlx5_12/1"
    assert s.components("ib:") == [p]
    assert (s.value(p, "state"), s.value(p, "state_code")) == ("DOWN", 1)
    assert (s.value(p, "active_mtu"), s.value(p, "max_mtu")) == (1024, 4096)
    assert (s.value(p, "link_layer"), s.value(p, "fw_ver"), s.value(p, "hca_type")) == (
        "Ethernet", "22.38.1900", "MT4125")
    s = parse_ibv_devinfo((DATA / "ibv_devinfo-deepep38.txt").read_text())
    assert s.value("ib:mlx5_2/1", "state") == "ACTIVE"


def test_registered_as_one_line() -> None:
    assert [s.name for s in REGISTRY].count("ibv_devinfo") == 1


def _check(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    rc = main(["check", "--json", "--no-nvml", "--checks", "ib", "--node", "gpu001", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_down_port_is_judged_and_active_is_ok(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = _check(["--ibv-devinfo", str(DATA / "ibv_devinfo-deepep60.txt")], capsys)
    (ib,) = doc["checks"]  # type: ignore[misc]
    assert rc == 1 and ib["status"] == "warning"  # pending port-down in a one-shot check
    assert [f["component"] for f in ib["findings"]] == ["ib:mlx5_12/1"]
    rc, doc = _check(["--ibv-devinfo", str(DATA / "ibv_devinfo-deepep38.txt")], capsys)
    assert rc == 0


def test_not_ibv_devinfo_is_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.txt"
    bad.write_text("CA 'mlx5_0'\n")
    rc, doc = _check(["--ibv-devinfo", str(bad)], capsys)
    assert rc == 3 and "ibv_devinfo" in json.dumps(doc)

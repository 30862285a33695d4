"""ibstat / ibstatus text parser on the real gpud captures."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import ParseError
from minutiae.node.sources.ib.parse_ibstat import parse_ibstat


def _parse(realdata: Path, name: str):  # type: ignore[no-untyped-def]
    path = realdata / "infiniband" / "gpud" / name
    return parse_ibstat(path.read_text(), str(path))


def test_h100_some_down_with_polling(realdata: Path) -> None:
    s = _parse(realdata, "ibstat.47.0.h100.some.down.with.polling.1")
    ports = s.components("ib:")
    assert len(ports) == 12
    down = {p: (s.value(p, "state"), s.value(p, "phys_state"), s.value(p, "rate_gbps"))
            for p in ports if s.value(p, "state") != "ACTIVE"}
    assert down == {"ib:mlx5_11/1": ("DOWN", "Polling", 40.0), "ib:mlx5_5/1": ("DOWN", "Disabled", 40.0)}
    assert s.value("ib:mlx5_0/1", "rate_gbps") == 400.0
    assert s.value("ib:mlx5_0/1", "hca_type") == "MT4129"
    assert s.value("ib:mlx5_0/1", "fw_ver") == "28.39.1002"
    assert s.value("ib:mlx5_1/1", "rate_gbps") == 100.0
    assert s.value("ib:mlx5_1/1", "link_layer") == "Ethernet"
    assert s.value("ib:mlx5_11/1", "state_code") == 1 and s.value("ib:mlx5_11/1", "phys_state_code") == 2


def test_some_down_0(realdata: Path) -> None:
    s = _parse(realdata, "ibstat.47.0.some.down.0")
    assert sorted(p for p in s.components("ib:") if s.value(p, "state") == "DOWN") == [
        "ib:mlx5_2/1", "ib:mlx5_7/1", "ib:mlx5_8/1"]


def test_ibpanic_is_a_problem(realdata: Path) -> None:
    s = _parse(realdata, "ibstat.39.0.a100.failed.ibpanic.exit-255.0")
    assert len(s.components("ib:")) == 8
    assert {s.value(p, "rate_gbps") for p in s.components("ib:")} == {200.0}
    assert len(s.problems) == 1
    assert s.problems[0].message.startswith("ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed")
    assert s.problems[0].where.endswith("ibstat.39.0.a100.failed.ibpanic.exit-255.0:137")


def test_ibstatus_format(realdata: Path) -> None:
    s = _parse(realdata, "ibstatus.39.0.a100.all.active.0")
    p = "ib:mlx5_0/1"
    assert (s.value(p, "state_code"), s.value(p, "state")) == (4, "ACTIVE")
    assert (s.value(p, "rate_gbps"), s.value(p, "width"), s.value(p, "speed")) == (200.0, 4, "HDR")
    assert s.value(p, "link_layer") == "InfiniBand"


def test_every_capture_parses_without_problems_except_the_panic(realdata: Path) -> None:
    for path in sorted((realdata / "infiniband" / "gpud").glob("ibstat*")):
        s = parse_ibstat(path.read_text(), str(path))
        assert bool(s.problems) == ("ibpanic" in path.name), path.name


def test_not_ibstat() -> None:
    with pytest.raises(ParseError, match="no ibstat"):
        parse_ibstat("Port 1:\n State: Active\n", "x")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=1500))
def test_never_crashes(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse_ibstat("CA 'mlx5_0'\n\tPort 1:\n" + text, "fuzz")


# issue 16: an ibstat port "State: Down" with "Physical state: LinkUp" (the link trained, the
# subnet manager has not brought it up) passed as "all checks passed", exit 0. The layout is
# ibstat's (infiniband-diags ibstat.c: "State:", "Physical state:", "Rate:", ...).
DOWN_LINKUP = """CA 'mlx5_0'
\tCA type: MT4123
\tNumber of ports: 1
\tFirmware version: 20.31.1014
\tHardware version: 0
\tNode GUID: 0x1070fd0300153530
\tSystem image GUID: 0x1070fd0300153530
\tPort 1:
\t\tState: Down
\t\tPhysical state: LinkUp
\t\tRate: 200
\t\tBase lid: 0
\t\tLMC: 0
\t\tSM lid: 0
\t\tCapability mask: 0x2651e848
\t\tPort GUID: 0x1070fd0300153530
\t\tLink layer: InfiniBand
"""


def test_down_while_linkup_is_judged_one_shot_warning(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from minutiae.cli.main import main

    f = tmp_path / "ibstat.txt"
    f.write_text(DOWN_LINKUP)
    rc = main(["check", "--no-nvml", "--checks", "ib", "--ibstat", str(f)])
    out = capsys.readouterr().out
    assert rc == 1, out  # docs/check.md: a pending port-down exits WARNING in a one-shot check
    assert "pending" in out and "mlx5_0/1: port state DOWN" in out and "all checks passed" not in out


# docs/check.md's table of IB port rules and one-shot exit codes, on every real capture
@pytest.mark.parametrize("name, rc", [
    ("ibstat.39.0.a100.failed.ibpanic.exit-255.0", 3),
    ("ibstat.47.0.a100.all.active.0", 0),
    ("ibstat.47.0.all.active.0", 0),
    ("ibstat.47.0.all.active.1", 0),
    ("ibstat.47.0.h100.all.active.1", 0),
    ("ibstat.47.0.h100.all.active.2", 0),
    ("ibstat.47.0.some.down.0", 0),          # three Ethernet ports Disabled: info only
    ("ibstat.47.0.some.down.1", 0),          # two Disabled: info only
    ("ibstat.47.0.h100.some.down.with.polling.1", 1),  # RoCE node, a fabric port Polling
    ("ibstatus.39.0.a100.all.active.0", 0),  # its 40 Gb/s Ethernet port is not "degraded"
])
def test_one_shot_exit_codes_of_the_real_captures(realdata: Path, name: str, rc: int,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from minutiae.cli.main import main

    path = realdata / "infiniband" / "gpud" / name
    got = main(["check", "--json", "--no-nvml", "--checks", "ib", "--ibstat", str(path)])
    doc = json.loads(capsys.readouterr().out)
    assert got == rc, doc["checks"]
    kinds = {f["kind"] for c in doc["checks"] for f in c["findings"]}
    assert "ib_rate_degraded" not in kinds
    if name.startswith("ibstat.47.0.some.down"):
        assert kinds == {"ib_port_disabled"}


def _one_shot(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    from minutiae.cli.main import main

    f = tmp_path / "ibstat.txt"
    f.write_text(text)
    rc = main(["check", "--json", "--no-nvml", "--checks", "ib", "--ibstat", str(f)])
    doc = json.loads(capsys.readouterr().out)
    return rc, [n.split(":")[0] for n in doc["notes"]] + [
        f"{f['rule']} {f['severity']}" for c in doc["checks"] for f in c["findings"]]


def test_an_ethernet_port_beside_infiniband_ports_never_drains(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    eth = DOWN_LINKUP.replace("mlx5_0", "mlx5_9").replace("Link layer: InfiniBand", "Link layer: Ethernet")
    up = DOWN_LINKUP.replace("State: Down", "State: Active")
    rc, what = _one_shot(tmp_path, up + eth, capsys)
    assert rc == 0 and what == ["pending ib.frontend-port-down"], what
    # the same down port on the InfiniBand fabric
    rc, what = _one_shot(tmp_path, up.replace("mlx5_0", "mlx5_9") + DOWN_LINKUP, capsys)
    assert rc == 1 and "ib.port-down warning" in what, what


def test_a_disabled_infiniband_port_is_shown_not_alarmed(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    rc, what = _one_shot(tmp_path, DOWN_LINKUP.replace("Physical state: LinkUp", "Physical state: Disabled"),
                         capsys)
    assert rc == 0 and what == ["ib.port-disabled info"], what

"""``--expected-ib-ports N``: how many ACTIVE InfiniBand ports the node must have.

On the real H200 capture (a VM: no ``class/infiniband``) 0 makes the ib check OK instead of
UNKNOWN and more is the ``ib.port-count-expected`` finding; on the real H100 sysfs snapshot
(8 InfiniBand ports, 1 Ethernet bond) the count is the snapshot's, and an HCA deleted from the
tree or a port DOWN is the finding, naming what the node has and what was expected."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from minutiae.cli.main import main
from minutiae.model import Action, Severity, Status
from minutiae.node.check import CheckConfig, CheckMemory, NodeReport, run_check
from minutiae.node.config import config_from_options
from minutiae.node.sources.ib.parse_ibstat import parse_ibstat
from minutiae.node.sources.ib.read_sysfs import read_sysfs_ib
from minutiae.node.sources.ib.source import NONE_EXPECTED
from minutiae.testing import FakeClock
from minutiae.testing.sysfs import ib_tree

DATA = Path(__file__).resolve().parents[1] / "data"
H200 = DATA / "h200"
H200_SYS = H200 / "sysfs" / "sys"
H200_ARGS = ["check", "--json", "--sysfs-root", str(H200_SYS), "--nvidia-smi-xml",
             str(H200 / "nvidia-smi-q-x.xml"), "--expected-gpus", "1", "--node", "h200"]
H100_IB = ("infiniband", "gpud", "sys-class-infiniband-h100.0")
RULE = "ib.port-count-expected"


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:  # type: ignore[type-arg]
    rc = main(argv)
    return rc, json.loads(capsys.readouterr().out)


def _ib(doc: dict) -> dict:  # type: ignore[type-arg]
    return next(c for c in doc["checks"] if c["check"] == "ib")


def _counted(report: NodeReport) -> list[tuple[str, str, str, str]]:
    return [(f.rule or "", f.severity.label, f.action.label, f.message)
            for f in report.findings if f.rule == RULE]


def _twice(cfg: CheckConfig) -> tuple[NodeReport, NodeReport]:
    """Two checks 130 s apart (the rule alarms once it has held 120 s)."""
    clock, mem = FakeClock(1_700_000_000.0), CheckMemory()
    first = run_check(cfg, clock, memory=mem)
    clock.advance(130.0)
    return first, run_check(cfg, clock, memory=mem)


# -- the H200 VM: no InfiniBand at all ----------------------------------------------------------

def test_h200_without_the_option_the_ib_check_stays_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    assert not (H200_SYS / "class" / "infiniband").exists()
    rc, doc = _cli(H200_ARGS, capsys)
    assert rc == 3 and doc["status"] == "unknown"
    ib = _ib(doc)
    assert ib["status"] == "unknown" and ib["findings"] == []
    assert ib["reason"].endswith("class/infiniband not found (no InfiniBand driver or wrong --sysfs-root)")


def test_h200_declared_ib_less_is_ok_and_the_exit_is_the_other_groups(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = _cli([*H200_ARGS, "--expected-ib-ports", "0"], capsys)
    ib = _ib(doc)
    assert (ib["status"], ib["reason"], ib["findings"]) == ("ok", NONE_EXPECTED, [])
    rc_rest, rest = _cli([*H200_ARGS, "--checks", "gpu,pcie,kernel_log,kernel"], capsys)
    assert rc == rc_rest == 0 and doc["status"] == rest["status"] == "ok"
    assert [c for c in doc["checks"] if c["check"] != "ib"] == rest["checks"]


def test_h200_with_ports_expected_is_the_finding_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = _cli([*H200_ARGS, "--expected-ib-ports", "4"], capsys)
    ib = _ib(doc)
    # one run without --state-file: the finding is pending (its 120 s have not passed), and
    # the missing directory is the reason: UNKNOWN, never OK
    assert rc == 3 and ib["status"] == "unknown"
    assert "class/infiniband: not found" in ib["reason"]
    assert "4 InfiniBand port(s) expected (--expected-ib-ports)" in ib["reason"]
    assert [(f["rule"], f["component"], f["severity"]) for f in ib["findings"]] == [(RULE, "ib_node", "warning")]
    assert "0 InfiniBand port(s) ACTIVE, 4 expected" in ib["findings"][0]["message"]
    # held 120 s (the agent, or check with --state-file): critical, the node drains
    first, then = _twice(CheckConfig(sysfs_root=H200_SYS, kmsg=None, node="h200", checks=("ib",),
                                     expected_ib_ports=4))
    assert first.result("ib").status is Status.UNKNOWN  # type: ignore[union-attr]
    ib_now = then.result("ib")
    assert ib_now is not None and ib_now.status is Status.CRITICAL and "not found" in (ib_now.reason or "")
    assert _counted(then) == [(RULE, "critical", "reboot", "0 InfiniBand port(s) ACTIVE, 4 expected "
                               "(--expected-ib-ports): an HCA missing or a port not ACTIVE")]
    assert then.drain and then.action is Action.REBOOT


def test_h200_boot_grace_keeps_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    # the captured /proc says 26 s after boot: no finding yet, but the check still says why
    assert (H200 / "sysfs" / "proc" / "uptime").read_text().split()[0] == "26.00"
    rc, doc = _cli([*H200_ARGS, "--proc-root", str(H200 / "sysfs" / "proc"), "--expected-ib-ports", "4"], capsys)
    ib = _ib(doc)
    assert rc == 3 and ib["status"] == "unknown" and ib["findings"] == []
    assert "4 InfiniBand port(s) expected" in ib["reason"]


# -- the real H100 sysfs snapshot ----------------------------------------------------------------

@pytest.fixture()
def h100(realdata: Path, tmp_path: Path) -> Path:
    return ib_tree(tmp_path / "sys", realdata.joinpath(*H100_IB))


def _ib_ports_in_files(root: Path) -> tuple[int, int]:
    """(InfiniBand ports, all ports) of a tree, read from its files, not by the parser."""
    ports = list((root / "class" / "infiniband").glob("*/ports/*"))
    ib = [p for p in ports if (p / "link_layer").read_text().strip() == "InfiniBand"]
    return len(ib), len(ports)


def test_the_count_is_the_snapshots_infiniband_ports(h100: Path) -> None:
    assert _ib_ports_in_files(h100) == (8, 9)  # mlx5_bond_0 is an Ethernet (RoCE) port
    s = read_sysfs_ib(h100)
    assert (s.value("ib_node", "ib_ports"), s.value("ib_node", "ib_active_ports")) == (8, 8)
    r = run_check(CheckConfig(sysfs_root=h100, kmsg=None, node="gpu001", checks=("ib",),
                              expected_ib_ports=8), FakeClock())
    assert _counted(r) == []
    without = run_check(CheckConfig(sysfs_root=h100, kmsg=None, node="gpu001", checks=("ib",)), FakeClock())
    assert r.results == without.results  # as many as expected: the check says what it said before


def test_a_missing_hca_is_the_finding(h100: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(h100 / "class" / "infiniband" / "mlx5_4")  # fell off the bus: gone from sysfs
    assert _ib_ports_in_files(h100) == (7, 8)
    s = read_sysfs_ib(h100)
    assert (s.value("ib_node", "ib_ports"), s.value("ib_node", "ib_active_ports")) == (7, 7)
    # the ports left are ACTIVE: without the option nothing says a port is missing
    plain = run_check(CheckConfig(sysfs_root=h100, kmsg=None, node="gpu001", checks=("ib",)), FakeClock())
    assert not any(f.kind == "ib_port_down" for f in plain.findings)
    rc, doc = _cli(["check", "--json", "--sysfs-root", str(h100), "--checks", "ib", "--node", "gpu001",
                    "--expected-ib-ports", "8"], capsys)
    found = [f for f in _ib(doc)["findings"] if f["rule"] == RULE]
    assert len(found) == 1 and "7 InfiniBand port(s) ACTIVE, 8 expected" in found[0]["message"]
    assert (found[0]["attrs"]["value"], found[0]["attrs"]["other"]) == (7, 8)
    assert rc == 1  # pending in a one-shot run without --state-file (a WARNING, as ib.port-down's)
    _, then = _twice(CheckConfig(sysfs_root=h100, kmsg=None, node="gpu001", checks=("ib",), expected_ib_ports=8))
    assert _counted(then) == [(RULE, "critical", "reboot", "7 InfiniBand port(s) ACTIVE, 8 expected "
                               "(--expected-ib-ports): an HCA missing or a port not ACTIVE")]
    assert then.result("ib").status is Status.CRITICAL  # type: ignore[union-attr]


def test_a_port_down_is_not_active(h100: Path) -> None:
    port = h100 / "class/infiniband/mlx5_7/ports/1"
    (port / "state").write_text("1: DOWN")
    (port / "phys_state").write_text("2: Polling")
    s = read_sysfs_ib(h100)
    assert (s.value("ib_node", "ib_ports"), s.value("ib_node", "ib_active_ports")) == (8, 7)
    _, then = _twice(CheckConfig(sysfs_root=h100, kmsg=None, node="gpu001", checks=("ib",), expected_ib_ports=8))
    assert [m for *_, m in _counted(then)] == ["7 InfiniBand port(s) ACTIVE, 8 expected "
                                               "(--expected-ib-ports): an HCA missing or a port not ACTIVE"]
    assert {f.rule for f in then.findings if f.severity is Severity.CRITICAL} == {RULE, "ib.port-down"}
    # fewer expected than present: the port is ib.port-down's business only
    _, seven = _twice(CheckConfig(sysfs_root=h100, kmsg=None, node="gpu001", checks=("ib",), expected_ib_ports=7))
    assert _counted(seven) == []


def test_ethernet_ports_are_not_counted(realdata: Path) -> None:
    # real ibstat: 8 InfiniBand ports, all Active, beside 4 Ethernet ports (3 Down)
    text = realdata.joinpath("infiniband", "gpud", "ibstat.47.0.some.down.0").read_text()
    assert (text.count("Link layer: InfiniBand"), text.count("Link layer: Ethernet")) == (8, 4)
    assert (text.count("State: Active"), text.count("State: Down")) == (9, 3)
    s = parse_ibstat(text)
    assert (s.value("ib_node", "ib_ports"), s.value("ib_node", "ib_active_ports")) == (8, 8)
    # an H100 node on RoCE (12 Ethernet ports): no InfiniBand port to count, as GPUd counts none
    roce = parse_ibstat(realdata.joinpath("infiniband", "gpud", "ibstat.47.0.h100.all.active.1").read_text())
    assert len(roce.components("ib:")) == 12
    assert (roce.value("ib_node", "ib_ports"), roce.value("ib_node", "ib_active_ports")) == (0, 0)


# -- the option ----------------------------------------------------------------------------------

CHECK = ["check", "--no-nvml", "--kmsg", ""]
AGENT = ["agent", "--cycles", "1", "--no-nvml", "--kmsg", "", "--metrics-listen", ""]


@pytest.mark.parametrize("value", ["-1", "abc", "1e3", "1025", ""])
@pytest.mark.parametrize("command", ["check", "agent"])
@pytest.mark.parametrize("option", ["--expected-ib-ports", "--expected-gpus"])
def test_a_bad_value_is_unknown_with_one_line(option: str, command: str, value: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    argv = CHECK if command == "check" else [*AGENT, "--state-dir", str(tmp_path / "st")]
    rc = main([*argv, option, value])
    captured = capsys.readouterr()
    # exit 3 (UNKNOWN), not click's usage error 2, which a HealthCheckProgram reads as CRITICAL
    assert rc == 3, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"minutiae: error: {option}: "), lines
    assert captured.out == "" and not (tmp_path / "st").exists()  # refused before anything ran


def test_the_option_reaches_the_check_config() -> None:
    assert config_from_options({"expected_ib_ports": 4}, "check").expected_ib_ports == 4
    assert config_from_options({}, "check").expected_ib_ports is None
    assert config_from_options({"expected_ib_ports": "0"}, "agent").expected_ib_ports == 0

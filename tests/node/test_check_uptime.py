"""The live check feeds the node's uptime (``<proc_root>/uptime``) to the counter rules: a port
DOWN on the real H100 sysfs snapshot one minute after boot is the boot grace of ib.port-down,
twenty minutes after boot it alarms; an unreadable or garbage uptime is no grace (and a note
naming the path); a captured sysfs tree is never judged with this machine's /proc/uptime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minutiae.agent.daemon import AgentOptions, check_config
from minutiae.cli.main import main
from minutiae.errors import SourceUnavailable
from minutiae.node.check import CheckConfig, CheckMemory, run_check
from minutiae.node.sources.uptime.parse import parse_uptime
from minutiae.node.sources.uptime.read import read_uptime
from minutiae.testing import FakeClock
from minutiae.testing.sysfs import ib_tree

SNAPSHOT = ("infiniband", "gpud", "sys-class-infiniband-h100.0")


@pytest.fixture()
def down_root(realdata: Path, tmp_path: Path) -> Path:
    """The real H100 snapshot with mlx5_7 port 1 DOWN (Polling), as while a node boots."""
    root = ib_tree(tmp_path / "sys", realdata.joinpath(*SNAPSHOT))
    port = root / "class/infiniband/mlx5_7/ports/1"
    (port / "state").write_text("1: DOWN")
    (port / "phys_state").write_text("2: Polling")
    return root


def _proc(tmp_path: Path, text: str | bytes) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "uptime").write_bytes(text.encode() if isinstance(text, str) else text)
    return proc


def _down(sys_root: Path, proc_root: Path | None) -> tuple[list[str], float | None, tuple[str, ...]]:
    """Two checks 130 s apart (ib.port-down alarms once a port stayed down 120 s): the second
    one's port-down findings, uptime and notes."""
    cfg = CheckConfig(sysfs_root=sys_root, kmsg=None, node="gpu001", checks=("ib",), proc_root=proc_root)
    clock, memory = FakeClock(1_700_000_000.0), CheckMemory()
    run_check(cfg, clock, memory=memory)
    clock.advance(130.0)
    rep = run_check(cfg, clock, memory=memory)
    return sorted(f.component or "" for f in rep.findings if f.kind == "ib_port_down"), rep.uptime_s, rep.notes


# -- parser and source ---------------------------------------------------------------------------

def test_parse_uptime_real_format() -> None:
    assert parse_uptime(b"350735.47 234388.90\n") == 350735.47
    assert parse_uptime("60.00 12.00") == 60.0
    for bad in (b"", b"\n", b"abc 1.0", b"-5.0 1.0", b"nan 1", b"inf 2", b"\xff\xfe"):
        assert parse_uptime(bad) is None


@given(st.binary(max_size=200))
def test_parse_uptime_garbage_never_crashes(data: bytes) -> None:
    v = parse_uptime(data)
    assert v is None or v >= 0


@given(st.floats(min_value=0, max_value=1e9), st.integers(min_value=0, max_value=20))
def test_parse_uptime_truncated_is_a_prefix_or_none(value: float, cut: int) -> None:
    text = f"{value:.2f} 1234.56\n"
    got = parse_uptime(text[:cut])
    assert got is None or got == float(text[:cut].split()[0])


def test_read_uptime_names_the_path(tmp_path: Path) -> None:
    assert read_uptime(_proc(tmp_path, "1200.5 99.0\n")) == 1200.5
    with pytest.raises(SourceUnavailable, match=str(tmp_path / "nope" / "uptime")):
        read_uptime(tmp_path / "nope")
    with pytest.raises(SourceUnavailable, match="not an uptime"):
        read_uptime(_proc(tmp_path, "garbage"))


# -- run_check ------------------------------------------------------------------------------------

def test_port_down_one_minute_after_boot_does_not_alarm(down_root: Path, tmp_path: Path) -> None:
    found, uptime, notes = _down(down_root, _proc(tmp_path, "60.00 100.00\n"))
    assert (found, uptime, notes) == ([], 60.0, ())


def test_port_down_twenty_minutes_after_boot_alarms(down_root: Path, tmp_path: Path) -> None:
    found, uptime, _ = _down(down_root, _proc(tmp_path, "1200.00 100.00\n"))
    assert (found, uptime) == (["ib:mlx5_7/1"], 1200.0)


@pytest.mark.parametrize("text", [b"garbage\n", b"", b"-3 1", b"\x00\xff"])
def test_garbage_uptime_is_unknown_not_a_grace(down_root: Path, tmp_path: Path, text: bytes) -> None:
    proc = _proc(tmp_path, text)
    found, uptime, notes = _down(down_root, proc)
    assert (found, uptime) == (["ib:mlx5_7/1"], None)
    assert len(notes) == 1 and str(proc / "uptime") in notes[0] and "no boot grace" in notes[0]


def test_missing_proc_root_is_a_note_and_no_grace(down_root: Path, tmp_path: Path) -> None:
    found, uptime, notes = _down(down_root, tmp_path / "noproc")
    assert (found, uptime) == (["ib:mlx5_7/1"], None)
    assert str(tmp_path / "noproc" / "uptime") in notes[0]


def test_a_captured_sysfs_tree_never_reads_this_machines_uptime(down_root: Path) -> None:
    assert CheckConfig(sysfs_root=down_root).uptime_root is None
    found, uptime, notes = _down(down_root, None)  # no note either: nothing was tried
    assert (found, uptime, notes) == (["ib:mlx5_7/1"], None, ())


def test_this_machine_defaults_to_proc() -> None:
    assert CheckConfig().uptime_root == Path("/proc")
    assert CheckConfig(sysfs_root=Path("/sys"), proc_root=Path("/x")).uptime_root == Path("/x")
    # the agent's defaults check this machine, so it reads /proc/uptime
    o = AgentOptions(controller=None, token="")
    assert check_config(o, "n", Path("/var/lib/minutiae")).uptime_root == Path("/proc")


def test_live_check_reports_this_machines_uptime() -> None:
    if not Path("/proc/uptime").is_file():
        pytest.skip("/proc/uptime absent")
    cfg = CheckConfig(kmsg=None, node="n", checks=("pcie",))
    before = parse_uptime(Path("/proc/uptime").read_bytes())
    rep = run_check(cfg, FakeClock(0.0))
    after = parse_uptime(Path("/proc/uptime").read_bytes())
    assert before is not None and after is not None and rep.uptime_s is not None
    assert before <= rep.uptime_s <= after


# -- the command line ----------------------------------------------------------------------------

def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    main(["check", "--json", "--no-nvml", "--checks", "ib", "--node", "gpu001", *args])
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, dict)
    return doc


def _down_in(doc: dict[str, object]) -> list[str]:
    """Ports ib.port-down judges down: alarmed, or pending (one check cannot see the 120 s the
    rule waits for; the note names the port)."""
    checks, notes = doc["checks"], doc["notes"]
    assert isinstance(checks, list) and isinstance(notes, list)
    alarmed = [f["component"] for c in checks for f in c["findings"] if f["kind"] == "ib_port_down"]
    pending = [f"ib:{n.split(': ')[1]}" for n in notes if n.startswith("pending ib.port-down: ")]
    return sorted(set(alarmed + pending))  # a pending port is also a WARNING finding (docs/check.md)


def test_cli_proc_root_gives_the_grace(down_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _cli(["--sysfs-root", str(down_root), "--proc-root", str(_proc(tmp_path, "60.0 1.0"))], capsys)
    assert doc["uptime_s"] == 60.0 and _down_in(doc) == []
    graced = doc["status"]
    doc = _cli(["--sysfs-root", str(down_root), "--proc-root", str(_proc(tmp_path, "1200.0 1.0"))], capsys)
    assert doc["uptime_s"] == 1200.0 and _down_in(doc) == ["ib:mlx5_7/1"]
    assert (graced, doc["status"]) == ("warning", "warning")  # the flapping rule counts the down


def test_cli_sysfs_root_alone_reads_no_uptime(down_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _cli(["--sysfs-root", str(down_root)], capsys)
    assert doc["uptime_s"] is None and _down_in(doc) == ["ib:mlx5_7/1"]
    assert not any("uptime" in str(n) for n in doc["notes"])  # type: ignore[attr-defined]

"""Kernel-log source (real /dev/kmsg when readable, files with a cursor) and the check state."""

from __future__ import annotations

import os
import stat
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import InputError, SourceUnavailable
from minutiae.model import Action, Finding, Severity
from minutiae.node.memory import CheckMemory, finding_key
from minutiae.node.memory_file import load_state, save_state
from minutiae.node.sources.kernel_log.read_kmsg import read_kernel_log
from minutiae.rules.counters.load import counter_rules
from minutiae.rules.counters.model import Context, evaluate

DEV_KMSG = Path("/dev/kmsg")


def test_real_dev_kmsg_incremental(tmp_path: Path) -> None:
    if not os.access(DEV_KMSG, os.R_OK):
        pytest.skip(f"{DEV_KMSG} is not readable here")
    try:
        chunks, cursor, reset = read_kernel_log(DEV_KMSG)
    except SourceUnavailable as exc:  # e.g. a container without CAP_SYSLOG
        pytest.skip(f"{DEV_KMSG}: {exc.reason}")
    assert reset and cursor["seq"] >= 0 and chunks
    first = chunks[0].split(b"\n", 1)[0]
    assert first.split(b";", 1)[0].count(b",") >= 3  # pri,seq,usec,flags;message
    if not os.access(DEV_KMSG, os.W_OK):
        pytest.skip(f"{DEV_KMSG} is not writable here")
    marker = f"minutiae-test {uuid.uuid4()}"
    try:
        with open(DEV_KMSG, "w") as fh:  # a benign line in the real kernel log
            fh.write(f"<6>{marker}\n")
    except OSError as exc:
        pytest.skip(f"cannot write {DEV_KMSG}: {exc.strerror}")
    chunks, cursor2, reset = read_kernel_log(DEV_KMSG, cursor)
    assert not reset
    new = b"".join(chunks).decode().splitlines()
    assert any(line.endswith(marker) for line in new)
    assert cursor2["seq"] > cursor["seq"]
    chunks, _, _ = read_kernel_log(DEV_KMSG, cursor2)
    assert marker not in b"".join(chunks).decode()


def test_file_cursor_offsets_rotation_and_partial_lines(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"a\nb\nc")  # no final newline
    chunks, cur, reset = read_kernel_log(log)
    assert reset and b"".join(chunks) == b"a\nb\nc\n" and cur["offset"] == 5
    with log.open("ab") as fh:
        fh.write(b"\nd\n")
    chunks, cur, reset = read_kernel_log(log, cur)
    assert not reset and b"".join(chunks) == b"\nd\n"
    chunks, cur2, reset = read_kernel_log(log, cur)
    assert chunks == [] and not reset and cur2 == cur
    log.write_bytes(b"x\n")  # truncated in place: starts over
    chunks, cur, reset = read_kernel_log(log, cur)
    assert reset and b"".join(chunks) == b"x\n"
    with pytest.raises(SourceUnavailable, match="nope.log"):
        read_kernel_log(tmp_path / "nope.log")


def _finding(n: int) -> Finding:
    return Finding("xid", Severity.CRITICAL, Action.REBOOT, f"Xid 79 on GPU 0000:{n:02x}:00.0", code=79,
                   pci=f"0000:{n:02x}:00.0", component="gpu:0000:44:00.0", line="NVRM: Xid ...", line_no=n,
                   time=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC), rule="xid", attrs={"name": "GPU_FELL_OFF"})


def test_state_round_trip(tmp_path: Path) -> None:
    mem = CheckMemory()
    mem.counters[("ib:mlx5_0/1", "symbol_error")] = (3.0, 1700000000.0)
    mem.log_cursor = {"path": "/dev/kmsg", "boot_id": "b", "seq": 42}
    mem.add_log_findings([_finding(1), _finding(1), _finding(2)])
    mem.drained_for = [finding_key(_finding(1))]
    path = tmp_path / "s" / "state.json"
    save_state(path, mem, 1700000000.0)
    back = load_state(path)
    assert back.counters == mem.counters and back.log_cursor == mem.log_cursor
    assert [(f.message, f.attrs["count"]) for f in back.log_findings] == [
        ("Xid 79 on GPU 0000:01:00.0", 2), ("Xid 79 on GPU 0000:02:00.0", 1)]
    assert back.log_findings[0].time == _finding(1).time and back.log_findings[0].action is Action.REBOOT
    assert back.drained_for == mem.drained_for
    assert not list(path.parent.glob(".*tmp"))  # no temporary file left behind


def test_unwritable_state_is_an_input_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot write state file"):
        save_state(blocker / "state.json", CheckMemory(), 0.0)


def test_a_state_path_that_is_not_a_regular_file_is_never_replaced(tmp_path: Path) -> None:
    # ``--state-file /dev/zero`` once put a regular file in place of the device node (the atomic
    # rename replaces whatever the path names); a fifo stands in for the device here
    fifo = tmp_path / "state.fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        save_state(fifo, CheckMemory(), 0.0)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not list(tmp_path.glob(".*tmp"))


def test_a_deeply_nested_state_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="corrupt state file"):
        load_state(path)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_state_never_crashes(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("st") / "state.json"
    path.write_bytes(data)
    try:
        load_state(path)
    except InputError as exc:
        assert "state.json" in str(exc)


_METRICS = sorted({m for r in counter_rules() for m in r.cond.metrics} | {"state", "hca_type", "device_kind"})
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**12), st.floats(allow_nan=True),
                    # no braces: the test reads a "{" in a message as an unformatted template
                    st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=8))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["gpu:0000:44:00.0", "ib:mlx5_0/1", "ib:mlx5_1/1", "pcie:0000:44:00.0", "node"]),
                       st.dictionaries(st.sampled_from(_METRICS), _VALUES, max_size=12), max_size=5),
       st.dictionaries(st.sampled_from(_METRICS), st.floats(-1e6, 1e12), max_size=6))
def test_counter_rules_never_crash_on_odd_values(values: dict, previous: dict) -> None:  # type: ignore[type-arg]
    prev = {(c, m): (v, 1_699_990_000.0) for c in values for m, v in previous.items()}
    for f in evaluate(counter_rules(), Context(values, prev, 1_700_000_000.0)):
        assert f.kind and f.message and "{" not in f.message


def test_one_megabyte_lines_and_binary_garbage_never_crash(tmp_path: Path) -> None:
    from minutiae.errors import ParseError
    from minutiae.node.sources.dcgm.parse import parse_dcgm
    from minutiae.node.sources.ib.parse_ibstat import parse_ibstat
    from minutiae.node.sources.ib.read_sysfs import read_sysfs_ib
    from minutiae.node.sources.nvidia_smi.parse.text import parse_nvidia_smi_text
    from minutiae.node.sources.nvidia_smi.read import read_nvidia_smi_file
    from minutiae.testing.sysfs import set_file

    big = "x" * (1 << 20)
    s = parse_nvidia_smi_text(f"Attached GPUs : 1\nGPU 00000000:44:00.0\n    Product Name : {big}\n", "big")
    assert s.value("gpu:0000:44:00.0", "name") == big
    with pytest.raises(ParseError):
        parse_ibstat(big, "big")
    s = parse_dcgm('DCGM_FI_DEV_GPU_TEMP{gpu="0",pci_bus_id="00000000:44:00.0"} 40\n' + big + "\n", "big")
    assert s.value("gpu:0000:44:00.0", "temperature_c") == 40.0 and len(s.problems) == 1
    garbage = tmp_path / "smi.bin"
    garbage.write_bytes(bytes(range(256)) * 4096)
    with pytest.raises(ParseError, match="smi.bin"):
        read_nvidia_smi_file(garbage)
    root = tmp_path / "sys"
    set_file(root, "class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE")
    set_file(root, "class/infiniband/mlx5_0/ports/1/phys_state", "5: LinkUp")
    set_file(root, "class/infiniband/mlx5_0/ports/1/rate", "400 Gb/sec (4X NDR)")
    set_file(root, "class/infiniband/mlx5_0/ports/1/counters/symbol_error", "9" * (1 << 20))
    snap = read_sysfs_ib(root)
    assert snap.value("ib:mlx5_0/1", "symbol_error") is None  # read capped at 4 KiB, not a counter
    assert [p.where.rsplit("/", 2)[-2:] for p in snap.problems] == [["counters", "symbol_error"]]

"""sysfs InfiniBand source+parser on the real H100 /sys/class/infiniband snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import SourceUnavailable
from minutiae.model.snapshot import SnapshotBuilder
from minutiae.node.sources.ib.parse_sysfs import parse_ib_port, parse_rate, parse_state
from minutiae.node.sources.ib.read_sysfs import read_sysfs_ib
from minutiae.testing.sysfs import ib_port, ib_tree, set_file

SNAP = ("infiniband", "gpud", "sys-class-infiniband-h100.0")


@pytest.fixture()
def h100_root(realdata: Path, tmp_path: Path) -> Path:
    return ib_tree(tmp_path / "sys", realdata.joinpath(*SNAP))


def test_h100_snapshot_exact_values(h100_root: Path) -> None:
    s = read_sysfs_ib(h100_root)
    ports = s.components("ib:")
    assert ports == [f"ib:mlx5_{d}/1" for d in ("0", "1", "4", "5", "6", "7", "8", "9", "bond_0")]
    for p in ports:
        assert s.value(p, "state") == "ACTIVE" and s.value(p, "state_code") == 4
        assert s.value(p, "phys_state") == "LinkUp" and s.value(p, "phys_state_code") == 5
    assert s.value("ib:mlx5_0/1", "rate_gbps") == 400.0
    assert (s.value("ib:mlx5_0/1", "width"), s.value("ib:mlx5_0/1", "speed")) == (4, "NDR")
    assert s.value("ib:mlx5_bond_0/1", "rate_gbps") == 200.0
    assert s.value("ib:mlx5_bond_0/1", "width") == 2
    assert s.value("ib:mlx5_bond_0/1", "link_layer") == "Ethernet"
    assert s.value("ib:mlx5_0/1", "link_layer") == "InfiniBand"
    assert s.value("ib:mlx5_0/1", "hca_type") == "MT4129"
    assert s.value("ib:mlx5_bond_0/1", "hca_type") == "MT41692"
    assert s.value("ib:mlx5_0/1", "fw_ver") == "28.41.1000"
    assert s.value("ib:mlx5_1/1", "link_downed") == 255  # saturated 8-bit counter
    assert s.value("ib:mlx5_0/1", "link_downed") == 0
    assert s.value("ib:mlx5_0/1", "port_rcv_errors") == 14
    assert s.value("ib:mlx5_0/1", "excessive_buffer_overrun_errors") == 15
    assert s.value("ib:mlx5_0/1", "port_xmit_wait") == 2489603687
    assert s.value("ib:mlx5_0/1", "port_rcv_data") == 230539874932483
    assert s.value("ib:mlx5_1/1", "port_rcv_data") == 205128687774249
    assert s.value("ib:mlx5_0/1", "hw_out_of_sequence") is not None  # hw_counters/ prefixed hw_
    assert s.problems == ()


def test_missing_and_garbage_counters_are_problems_with_the_path(h100_root: Path) -> None:
    port = ib_port(h100_root, "mlx5_4")
    set_file(h100_root, f"{port}/counters/symbol_error", "n/a\n")
    (h100_root / port / "state").unlink()
    set_file(h100_root, f"{port}/rate", "fast")
    s = read_sysfs_ib(h100_root)
    where = {p.where.rsplit("/", 2)[-2] + "/" + p.where.rsplit("/", 1)[-1]: p.message for p in s.problems}
    assert where["counters/symbol_error"] == "not a non-negative integer: 'n/a'"
    assert where["1/state"] == "missing"
    assert where["1/rate"].startswith("not '<n> Gb/sec")
    assert all(str(h100_root) in p.where for p in s.problems)
    assert s.value("ib:mlx5_4/1", "symbol_error") is None
    assert s.value("ib:mlx5_4/1", "link_downed") == 0  # the rest of the port still read


def test_no_infiniband_directory_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match="class/infiniband not found"):
        read_sysfs_ib(tmp_path)


@pytest.mark.parametrize(("text", "want"), [
    ("4: ACTIVE", (4, "ACTIVE")), ("1: DOWN\n", (1, "DOWN")), ("5: LinkUp", (5, "LinkUp")),
    ("2: Polling", (2, "Polling")), ("ACTIVE", None), ("", None),
])
def test_parse_state(text: str, want: tuple[int, str] | None) -> None:
    assert parse_state(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("400 Gb/sec (4X NDR)", (400.0, 4, "NDR")), ("200 Gb/sec (2X NDR)\n", (200.0, 2, "NDR")),
    ("100 Gb/sec (4X EDR)", (100.0, 4, "EDR")), ("2.5 Gb/sec (1X SDR)", (2.5, 1, "SDR")),
    ("10 Gb/sec", (10.0, None, None)), ("fast", None),
])
def test_parse_rate(text: str, want: object) -> None:
    assert parse_rate(text) == want


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(
    st.sampled_from(["state", "phys_state", "rate", "link_layer", "counters/symbol_error",
                     "counters/link_downed", "hw_counters/out_of_buffer", "counters/x"]),
    st.one_of(st.none(), st.text(max_size=40)), max_size=8))
def test_port_parser_never_crashes(files: dict[str, str | None]) -> None:
    b = SnapshotBuilder("fuzz")
    parse_ib_port(b, "mlx5_0", "1", files, "/sys/class/infiniband/mlx5_0/ports/1")
    snap = b.build()
    for o in snap.observations:
        if o.metric in ("symbol_error", "link_downed", "hw_out_of_buffer"):
            assert isinstance(o.value, int) and o.value >= 0

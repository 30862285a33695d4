"""sysfs PCIe link source+parser on a sysfs tree built the way the kernel writes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import SourceUnavailable
from minutiae.parsers.pcie import device_kind, parse_pcie_device, parse_speed
from minutiae.parsers.snapshot import SnapshotBuilder
from minutiae.sources.sysfs_pcie import read_sysfs_pcie
from minutiae.testing.sysfs import pcie_device


def test_reads_gpus_and_nics_only(tmp_path: Path) -> None:
    pcie_device(tmp_path, "0000:44:00.0", speed="16.0 GT/s PCIe", width="8")
    pcie_device(tmp_path, "0000:45:00.0", pci_class="0x020700", vendor="0x15b3", speed="32.0 GT/s PCIe")
    pcie_device(tmp_path, "0000:00:1f.0", pci_class="0x060100", vendor="0x8086")
    s = read_sysfs_pcie(tmp_path)
    assert s.components() == ["pcie:0000:44:00.0", "pcie:0000:45:00.0"]
    g = "pcie:0000:44:00.0"
    assert (s.value(g, "speed_gts"), s.value(g, "gen"), s.value(g, "width")) == (16.0, 4, 8)
    assert (s.value(g, "max_speed_gts"), s.value(g, "max_gen"), s.value(g, "max_width")) == (32.0, 5, 16)
    assert s.value(g, "device_kind") == "gpu"
    assert s.value("pcie:0000:45:00.0", "device_kind") == "nic"


def test_unreadable_values_are_problems(tmp_path: Path) -> None:
    d = pcie_device(tmp_path, "0000:44:00.0")
    (d / "current_link_width").write_text("x16\n")
    (d / "max_link_speed").unlink()
    s = read_sysfs_pcie(tmp_path)
    msgs = sorted((p.where.rsplit("/", 1)[-1], p.message) for p in s.problems)
    assert msgs == [("current_link_width", "not a lane count: 'x16'"), ("max_link_speed", "unreadable")]


def test_missing_bus_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match="bus/pci/devices"):
        read_sysfs_pcie(tmp_path)


@pytest.mark.parametrize(("text", "want"), [
    ("16.0 GT/s PCIe\n", 16.0), ("8 GT/s", 8.0), ("2.5 GT/s PCIe", 2.5), ("Unknown", 0.0),
    ("Unknown speed", 0.0), ("fast", None),
])
def test_parse_speed(text: str, want: float | None) -> None:
    assert parse_speed(text) == want


def test_device_kind() -> None:
    assert device_kind("0x030200\n", "0x10de") == "gpu"
    assert device_kind("0x068000", "0x10de") == "nvswitch"
    assert device_kind("0x020000", "0x15b3") == "nic"
    assert device_kind("0x030000", "0x1a03") == "other"  # ASPEED BMC VGA


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["current_link_speed", "current_link_width", "max_link_speed",
                                        "max_link_width", "class", "vendor"]),
                       st.one_of(st.none(), st.text(max_size=30))))
def test_parser_never_crashes(files: dict[str, str | None]) -> None:
    b = SnapshotBuilder("fuzz")
    parse_pcie_device(b, "0000:44:00.0", files, "/sys/bus/pci/devices/0000:44:00.0")
    b.build()

"""sysfs PCIe link source+parser on a sysfs tree built the way the kernel writes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import SourceUnavailable
from minutiae.model.snapshot import SnapshotBuilder
from minutiae.node.sources.pcie.parse import device_kind, parse_pcie_device, parse_speed
from minutiae.node.sources.pcie.read import read_sysfs_pcie
from minutiae.testing.sysfs import pcie_device


def test_reads_gpus_and_nics_only(tmp_path: Path) -> None:
    pcie_device(tmp_path, "0000:44:00.0", speed="16.0 GT/s PCIe", width="8")
    pcie_device(tmp_path, "0000:45:00.0", pci_class="0x020700", vendor="0x15b3", speed="32.0 GT/s PCIe")
    pcie_device(tmp_path, "0000:00:1f.0", pci_class="0x060100", vendor="0x8086")
    s = read_sysfs_pcie(tmp_path)
    assert s.components("pcie:") == ["pcie:0000:44:00.0", "pcie:0000:45:00.0"]
    assert s.value("node", "pcie_gpu_count") == 1
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
                                        "max_link_width", "class", "vendor", "aer_dev_correctable",
                                        "aer_dev_fatal", "aer_dev_nonfatal"]),
                       st.one_of(st.none(), st.text(max_size=60))))
def test_parser_never_crashes(files: dict[str, str | None]) -> None:
    b = SnapshotBuilder("fuzz")
    parse_pcie_device(b, "0000:44:00.0", files, "/sys/bus/pci/devices/0000:44:00.0")
    b.build()


def test_aer_statistics_in_the_kernels_layout(tmp_path: Path) -> None:
    d = pcie_device(tmp_path, "0000:44:00.0", aer={"correctable": 7, "fatal": 0, "nonfatal": 2})
    assert (d / "aer_dev_correctable").read_text().splitlines()[0] == "Receiver Error 7"
    s = read_sysfs_pcie(tmp_path)
    g = "pcie:0000:44:00.0"
    assert (s.value(g, "aer_correctable"), s.value(g, "aer_fatal"), s.value(g, "aer_nonfatal")) == (7, 0, 2)
    (d / "aer_dev_fatal").write_text("garbage\n")
    s = read_sysfs_pcie(tmp_path)
    assert [(p.where.rsplit("/", 1)[-1], p.message) for p in s.problems] == [("aer_dev_fatal", "no TOTAL_ERR_FATAL line")]
    assert s.value(g, "aer_fatal") is None and s.value(g, "aer_nonfatal") == 2


def test_aer_findings_across_runs(tmp_path: Path) -> None:
    from minutiae.model import Action
    from minutiae.node.check import CheckConfig, CheckMemory, run_check
    from minutiae.testing import FakeClock

    pcie_device(tmp_path, "0000:44:00.0", aer={"correctable": 0})
    mem, clock = CheckMemory(), FakeClock()
    cfg = CheckConfig(sysfs_root=tmp_path, kmsg=None, node="n", checks=("pcie",))
    assert run_check(cfg, clock, memory=mem).findings == ()
    pcie_device(tmp_path, "0000:44:00.0", aer={"correctable": 400, "fatal": 1})
    clock.advance(3600)
    r = run_check(cfg, clock, memory=mem)
    assert sorted((f.rule, f.action) for f in r.findings) == [
        ("pcie.aer-correctable-rate", Action.NONE), ("pcie.aer-fatal-new", Action.REBOOT),
        ("pcie.aer-fatal-since-boot", Action.NONE)]
    assert r.drain


def test_ib_device_pci_address_from_the_device_link(tmp_path: Path, realdata: Path) -> None:
    import os

    from minutiae.node.sources.ib.read_sysfs import read_sysfs_ib
    from minutiae.testing.sysfs import ib_tree

    root = ib_tree(tmp_path / "sys", realdata / "infiniband" / "gpud" / "sys-class-infiniband-h100.0")
    target = pcie_device(root, "0000:1a:00.0", pci_class="0x020700", vendor="0x15b3")
    os.symlink(target, root / "class" / "infiniband" / "mlx5_0" / "device")
    s = read_sysfs_ib(root)
    assert s.value("ib:mlx5_0/1", "pci") == "0000:1a:00.0"
    assert s.value("ib:mlx5_1/1", "pci") is None


@pytest.mark.parametrize("digits", ["¹", "16²", "٣"])
def test_non_ascii_digits_are_not_numbers(digits: str) -> None:
    """str.isdigit() accepts superscripts and other scripts' digits that int() rejects (found by
    hypothesis): they must read as non-numeric, never crash."""
    b = SnapshotBuilder("fuzz")
    parse_pcie_device(b, "0000:44:00.0", {"current_link_width": digits, "max_link_width": "16",
                                         "aer_dev_fatal": f"TOTAL_ERR_FATAL {digits}"},
                      "/sys/bus/pci/devices/0000:44:00.0")
    snap = b.build()
    assert snap.value("pcie:0000:44:00.0", "width") is None
    assert snap.value("pcie:0000:44:00.0", "max_width") == 16

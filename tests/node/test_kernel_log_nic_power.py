"""The ConnectX boot line "Detected insufficient power on the PCIe slot (27W)" is a standing
property of the slot, printed at every driver load: recorded as info, never an alarm
(docs/rules.md, kernel_log.toml rule nic-power)."""

from __future__ import annotations

from pathlib import Path

from minutiae.model import Severity, Status
from minutiae.node.result import status_of
from minutiae.node.sources.kernel_log.parse import parse_lines
from minutiae.rules.log_findings import findings_from_events

BOOT_LOG = "kernel_logs/gpud/pkg_dmesg__dmesg.decode.iso.log.1"


def test_real_boot_log_power_lines_are_info_and_the_node_stays_ok(realdata: Path) -> None:
    lines = (realdata / BOOT_LOG).read_text(errors="replace").splitlines()
    findings = list(findings_from_events(parse_lines(lines, year=2025)))
    power = [f for f in findings if f.rule == "nic-power"]
    # every mlx5 function of the node prints it once, within 32 s (15:36:26-15:36:58)
    assert len(power) == 12
    assert len({f.pci for f in power}) == 12
    assert {f.severity for f in power} == {Severity.INFO}
    assert all(f.time is not None for f in power)
    times = sorted(f.time.timestamp() for f in power if f.time is not None)
    assert 31.0 < times[-1] - times[0] < 32.0
    assert all(f.attrs.get("watts") == "27" and f.attrs.get("problem") == "power" for f in power)
    assert "less power than the card's budget" in power[0].message
    # the same node's NICs came up at full PCIe bandwidth: the line is not a failure of the node
    full = [ln for ln in lines if "504.112 Gb/s available PCIe bandwidth" in ln]
    assert len(full) == 8
    # the power lines alone leave the kernel-log check OK
    assert status_of(power) is Status.OK


def test_power_line_is_info_in_every_prefix_style() -> None:
    msg = "mlx5_core 0000:5c:00.0: mlx5_pcie_event:299:(pid 268269): Detected insufficient power on the PCIe slot (27W)."
    lines = [f"[Sun Dec  1 14:54:40 2024] ny2g1r12hh2 kernel: {msg}",
             f"[   31.005123] {msg}",
             f"kern  :warn  : 2025-01-17T15:36:26,478631+00:00 {msg}",
             f"4,814,73112100400,-;{msg}"]
    for line in lines:
        fs = [f for f in findings_from_events(parse_lines([line], year=2024)) if f.rule == "nic-power"]
        assert len(fs) == 1, line
        assert fs[0].severity is Severity.INFO and fs[0].pci == "0000:5c:00.0"

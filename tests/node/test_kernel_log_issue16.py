"""Issue 16 item 1: lines the corpus cannot hold for lack of a citable public source (taken from
the issue text, "issue 16"), and the provisional AER header: one fault is one event whether the
kernel printed its header alone (rate-limited) or header + "PCIe Bus Error" details."""

from __future__ import annotations

from minutiae.model.vocab import Action, Severity
from minutiae.node.sources.kernel_log.scan import scan_chunks


def scan(text: str, *, chunk: int | None = None) -> list[tuple[str, int | None, str, str, str | None]]:
    data = text.encode()
    chunks = [data] if chunk is None else [data[i:i + chunk] for i in range(0, len(data), chunk)]
    return [(f.kind, f.code, f.severity.label, f.action.label, f.rule)
            for f in scan_chunks(chunks, year=2025)]


def test_xid_with_elided_pci_field_is_found_with_its_catalog_action() -> None:
    # issue 16: "an XID line whose PCI field was elided by the reporter (`Xid (PCI:...): 145, …`)"
    fs = list(scan_chunks([b"[ 812.1] NVRM: Xid (PCI:...): 145, RLW_REMAP Nonfatal XC0 i0 Link 01\n"],
                          year=2025))
    assert [(f.kind, f.code) for f in fs] == [("xid", 145)]
    assert fs[0].component in (None, "gpu")  # no made-up PCI address
    red = list(scan_chunks([b"NVRM: Xid (PCI:<redacted>): 79, pid='<unknown>', name=<unknown>, "
                            b"GPU has fallen off the bus.\n"], year=2025))
    assert [(f.kind, f.code, f.severity, f.action) for f in red][:1] == [
        ("xid", 79, Severity.CRITICAL, Action.REBOOT)]


def test_mlx4_firmware_command_failure_carries_the_firmware_status() -> None:
    # issue 16: "`mlx4_core …: command 0x5a failed: fw status = 0x2`"
    (f,) = scan_chunks([b"[ 33.2] mlx4_core 0000:04:00.0: command 0x5a failed: fw status = 0x2\n"],
                       year=2025)
    assert (f.kind, f.severity, f.component) == ("nic_error", Severity.WARNING, "nic:0000:04:00.0")
    assert f.attrs["fw_status_code"] == "0x2" and f.attrs["opcode"] == "0x5a"


def test_mlx5_firmware_status_in_attrs() -> None:
    (f,) = scan_chunks([b"[145291.904971] mlx5_core 0000:04:00.0: mlx5_cmd_check:795:(pid 9993): "
                        b"RTR2RTS_QP(0x504) op_mod(0x0) failed, status bad parameter(0x3), "
                        b"syndrome (0x4bb88f)\n"], year=2025)
    assert (f.attrs["command"], f.attrs["fw_status"], f.attrs["fw_status_code"]) == (
        "RTR2RTS_QP", "bad parameter", "0x3")


HEADER = "[ 46.675818] pcieport 0000:00:1d.0: AER: Corrected error received: 0000:02:00.0\n"
DETAIL = ("[ 46.675933] nvme 0000:02:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
          "(Receiver ID)\n")
FILLER = "[ 46.7] usb 1-2: new high-speed USB device number 3 using xhci_hcd\n"


def test_aer_header_followed_by_details_is_one_event_the_details() -> None:
    for chunk in (None, 7, 1):  # whole, split mid-line, one byte at a time (a kmsg stream)
        assert scan(HEADER + DETAIL, chunk=chunk) == [
            ("pcie_aer", None, "info", "none", "pcie-aer-corrected")], chunk


def test_lone_aer_header_is_an_event_in_order() -> None:
    text = HEADER + FILLER * 4 + DETAIL
    assert [r[4] for r in scan(text)] == ["pcie-aer-corrected-header", "pcie-aer-corrected"]
    assert [r[4] for r in scan(text, chunk=5)] == ["pcie-aer-corrected-header", "pcie-aer-corrected"]
    assert [r[4] for r in scan(HEADER)] == ["pcie-aer-corrected-header"]
    two = HEADER + HEADER
    assert [r[4] for r in scan(two)] == ["pcie-aer-corrected-header"] * 2


def test_fatal_header_alone_drains_and_details_of_another_kind_do_not_swallow_it() -> None:
    fatal = "pcieport 0000:3a:00.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0\n"
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    got = scan(fatal + xid)
    assert [(k, s, a) for k, _, s, a, _ in got] == [
        ("pcie_aer", "critical", "reboot"), ("xid", "critical", "reboot")]

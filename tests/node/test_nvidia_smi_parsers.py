"""nvidia-smi -q -x (XML) and -q (text) parsers against real captures (exact values)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import ParseError
from minutiae.model.gpu_metrics import REASONS, normalize_pci, reason_names
from minutiae.model.snapshot import Snapshot
from minutiae.node.sources.nvidia_smi.parse.text import parse_nvidia_smi_text
from minutiae.node.sources.nvidia_smi.parse.xml import parse_nvidia_smi_xml
from minutiae.node.sources.nvidia_smi.read import read_nvidia_smi_file


def _xml(realdata: Path, name: str) -> Snapshot:
    path = realdata / "nvidia_smi" / "telegraf" / name
    return parse_nvidia_smi_xml(path.read_bytes(), str(path))


def _text(realdata: Path, *parts: str) -> Snapshot:
    path = realdata.joinpath("nvidia_smi", *parts)
    return parse_nvidia_smi_text(path.read_text(), str(path))


def test_xml_a10g_every_field(realdata: Path) -> None:
    s = _xml(realdata, "a10g.xml")
    g = "gpu:0000:00:1e.0"
    assert s.components("gpu:") == [g]
    assert s.value("node", "driver_version") == "515.105.01"
    assert s.value("node", "gpu_count") == 1
    assert s.value(g, "name") == "NVIDIA A10G"
    assert s.value(g, "uuid") == "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"
    assert s.value(g, "vbios_version") == "94.02.75.00.01"
    assert (s.value(g, "pcie_gen_current"), s.value(g, "pcie_gen_max")) == (1, 4)
    assert (s.value(g, "pcie_width_current"), s.value(g, "pcie_width_max")) == (8, 16)
    assert s.value(g, "pcie_replay") == 0
    assert s.value(g, "temperature_c") == 17.0
    assert s.value(g, "temperature_slowdown_c") == 95.0
    assert s.value(g, "power_w") == 25.58
    assert s.value(g, "power_limit_w") == 300.0
    assert (s.value(g, "remap_pending"), s.value(g, "remap_failure")) == (False, False)
    assert s.value(g, "ecc_dbe_volatile") == 0 and s.value(g, "ecc_sbe_aggregate") == 0
    # clocks_throttle_reasons (v11): only gpu_idle active
    assert s.value(g, "clock_event_reasons") == REASONS["gpu_idle"]
    assert s.problems == ()


def test_xml_a100_v12_mig_and_attached_count(realdata: Path) -> None:
    s = _xml(realdata, "a100-sxm4-v12.xml")
    g = "gpu:0000:01:00.0"
    # telegraf kept one <gpu> of the four the driver reports: a real gpu_count < attached case
    assert s.value("node", "attached_gpus") == 4
    assert s.value("node", "gpu_count") == 1
    assert s.value(g, "vbios_version") == "92.00.36.00.02"
    assert s.value(g, "power_w") == 67.03
    assert s.value(g, "reset_required") is False
    assert s.value(g, "clock_event_reasons") == 0  # clocks_event_reasons, all Not Active
    assert s.value(g, "remap_pending") is None  # <remapped_rows>N/A</remapped_rows>: not observed


def test_xml_old_ecc_layout_and_na(realdata: Path) -> None:
    s = _xml(realdata, "gt-1030.xml")  # single_bit/double_bit layout, all N/A on GeForce
    g = s.components("gpu:")[0]
    assert s.value(g, "ecc_sbe_volatile") is None
    assert s.value(g, "temperature_c") == 36.0
    assert s.problems == ()


def test_xml_deprecated_text_is_not_a_value(realdata: Path) -> None:
    # rtx-3060: <reset_required>Requested functionality has been deprecated</reset_required>
    s = _xml(realdata, "rtx-3060-v12.xml")
    assert s.problems == ()
    assert s.value("gpu:0000:2d:00.0", "reset_required") is None


def test_xml_every_telegraf_capture_parses(realdata: Path) -> None:
    counts = {}
    for path in sorted((realdata / "nvidia_smi" / "telegraf").glob("*.xml")):
        s = parse_nvidia_smi_xml(path.read_bytes(), str(path))
        counts[path.name] = len(s.components("gpu:"))
        assert s.problems == (), path.name
    assert counts["dual_a5000-v13.xml"] == 2 and counts["gtx-1070-ti.xml"] == 1
    assert len(counts) == 19


def test_text_h100_535_183_replays_and_power_brake(realdata: Path) -> None:
    s = _text(realdata, "gpud", "nvidia-smi-query.535.183.01.out.0.valid")
    gpus = s.components("gpu:")
    assert gpus == [f"gpu:0000:{b}:00.0" for b in ("53", "64", "75", "86", "97", "a8", "b9", "ca")]
    assert [s.value(g, "pcie_replay") for g in gpus] == [120, 111, 58, 60, 63, 93, 69, 78]
    assert s.value("node", "driver_version") == "535.183.01"
    assert s.value("gpu:0000:53:00.0", "vbios_version") == "96.00.74.00.01"
    assert s.value("gpu:0000:53:00.0", "power_limit_w") == 700.0
    mask = s.value("gpu:0000:75:00.0", "clock_event_reasons")
    assert isinstance(mask, int)
    assert reason_names(mask) == ["sw_power_cap", "sw_thermal_slowdown", "hw_power_brake_slowdown"]
    assert s.problems == ()


def test_text_h100_535_161_nested_reasons(realdata: Path) -> None:
    s = _text(realdata, "gpud", "nvidia-smi-query.535.161.08.out.0.valid")
    g = "gpu:0000:19:00.0"
    # "HW Slowdown : Active" with "HW Power Brake Slowdown : Active" indented under it
    assert reason_names(int(s.value(g, "clock_event_reasons") or 0)) == [
        "hw_slowdown", "hw_power_brake_slowdown"]
    assert s.value(g, "pcie_replay") == 67
    assert s.value(g, "temperature_c") == 29.0
    assert s.value(g, "ecc_dbe_volatile") == 0


def test_text_a10_remapped_rows_pending(realdata: Path) -> None:
    s = _text(realdata, "gpud", "nvidia-smi-query.535.129.03.out.0.valid.a10")
    g = s.components("gpu:")[0]
    assert s.value(g, "remap_uncorrectable") == 4
    assert s.value(g, "remap_pending") is True
    assert s.value(g, "remap_failure") is False


def test_text_ml_engineering_excerpt_with_elisions(realdata: Path) -> None:
    s = _text(realdata, "ml-engineering", "nvidia-smi-q_a100_xid63_remapped_rows_pending_excerpt.txt")
    g = "gpu:0000:10:1c.0"
    assert s.value(g, "ecc_sbe_volatile") == 177
    assert s.value(g, "ecc_sbe_aggregate") == 177
    assert s.value(g, "remap_correctable") == 1
    assert s.value(g, "remap_pending") is True
    assert s.value("node", "attached_gpus") == 8


def test_text_truncated_capture_counts_what_is_there(realdata: Path) -> None:
    s = _text(realdata, "gpud", "nvidia-smi-query.535.183.01.out.0.invalid")
    assert s.value("node", "attached_gpus") == 8
    assert s.value("node", "gpu_count") == 1
    assert s.value("gpu:0000:53:00.0", "pcie_replay") == 120


def test_source_sniffs_xml_and_text(realdata: Path) -> None:
    a = read_nvidia_smi_file(realdata / "nvidia_smi" / "telegraf" / "tesla-t4.xml")
    b = read_nvidia_smi_file(realdata / "nvidia_smi" / "gpud" / "nvidia-smi-query.560.35.03.out.0.valid")
    assert a.source == "nvidia-smi-xml" and b.source == "nvidia-smi-q"


def test_garbage_and_truncated_xml_raise_parse_error_naming_the_path(tmp_path: Path, realdata: Path) -> None:
    data = (realdata / "nvidia_smi" / "telegraf" / "a10g.xml").read_bytes()
    bad = tmp_path / "cut.xml"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ParseError, match="cut.xml"):
        read_nvidia_smi_file(bad)
    with pytest.raises(ParseError, match="expected <nvidia_smi_log>"):
        parse_nvidia_smi_xml(b"<html></html>", "x")
    with pytest.raises(ParseError, match="no nvidia-smi -q header"):
        parse_nvidia_smi_text("hello\nworld\n", "y")


def test_non_numeric_counter_is_a_problem_not_a_value() -> None:
    doc = b"""<nvidia_smi_log><driver_version>1</driver_version><gpu id="00000000:44:00.0">
      <ecc_errors><volatile><sram_correctable>lots</sram_correctable><dram_correctable>0</dram_correctable>
      </volatile></ecc_errors><pci><replay_counter>12</replay_counter></pci></gpu></nvidia_smi_log>"""
    s = parse_nvidia_smi_xml(doc, "doc.xml")
    assert s.value("gpu:0000:44:00.0", "ecc_sbe_volatile") is None
    assert s.value("gpu:0000:44:00.0", "pcie_replay") == 12
    assert [p.where for p in s.problems] == ["doc.xml: gpu 0000:44:00.0: ecc_errors/volatile/sram_correctable"]


@pytest.mark.parametrize(("raw", "want"), [
    ("00000000:19:00.0", "0000:19:00.0"), ("0000:CA:00.0", "0000:ca:00.0"), ("44:00.0", "0000:44:00.0"),
    ("00000001:10:1C.0", "0001:10:1c.0"), ("zz:00.0", None), ("100000000:19:00.0", None),
])
def test_normalize_pci(raw: str, want: str | None) -> None:
    assert normalize_pci(raw) == want


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=2000))
def test_xml_parser_never_crashes_on_bytes(data: bytes) -> None:
    with contextlib.suppress(ParseError):
        parse_nvidia_smi_xml(data, "fuzz")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=2000))
def test_text_parser_never_crashes(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse_nvidia_smi_text(text, "fuzz")


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=5000))
def test_text_parser_truncation_never_crashes(realdata: Path, cut: int) -> None:
    path = realdata / "nvidia_smi" / "gpud" / "nvidia-smi-query.535.161.08.out.0.valid"
    text = path.read_text()[: cut * 10]
    try:
        s = parse_nvidia_smi_text(text, "cut")
    except ParseError:
        return
    assert all(o.component.startswith(("gpu:", "node")) for o in s.observations)


@pytest.mark.parametrize(("line", "comp", "reason"), [
    ("Unable to determine the device handle for GPU0000:CB:00.0: Unknown Error", "gpu:0000:cb:00.0", "Unknown Error"),
    ("Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error", "gpu:0000:34:00.0", "Unknown Error"),
    ("Unable to determine the device handle for GPU 0: Unknown Error", "gpu:index0", "Unknown Error"),
])
def test_unopenable_gpu_is_lost(line: str, comp: str, reason: str, realdata: Path) -> None:
    head = realdata.joinpath("nvidia_smi", "gpud", "nvidia-smi-query.535.161.08.out.0.valid").read_text()
    s = parse_nvidia_smi_text(line + "\n" + head, "q")
    assert s.value(comp, "lost") is True and s.value(comp, "lost_reason") == reason
    assert s.value("node", "gpu_count") == 8


def test_nvlink_status_a100(realdata: Path) -> None:
    from minutiae.node.sources.nvidia_smi.parse.nvlink import parse_nvlink_status

    path = realdata / "nvidia_smi" / "gpud" / "nvidia-smi.nvlink.status.a100"
    s = parse_nvlink_status(path.read_text(), str(path))
    gpus = s.components("gpu:")
    assert gpus == [f"gpu:index{i}" for i in range(8)]
    assert {s.value(g, "nvlink_active_links") for g in gpus} == {12}
    assert {s.value(g, "nvlink_inactive_links") for g in gpus} == {0}
    assert s.value("gpu:index0", "nvlink_gbps_min") == 25.0
    assert s.value("gpu:index7", "uuid") == "GPU-754035b4-4708-efcd-b261-623aea38bcad"
    assert s.problems == ()
    empty = realdata / "nvidia_smi" / "gpud" / "nvidia-smi.nvlink.status.a10"  # no NVLink: empty
    assert parse_nvlink_status(empty.read_text(), str(empty)).observations == ()


def test_nvlink_inactive_links_map_onto_the_gpu_by_uuid(realdata: Path) -> None:
    from minutiae.node.sources.nvidia_smi.parse.nvlink import by_uuid, parse_nvlink_status
    from minutiae.rules.counters.load import counter_rules
    from minutiae.rules.counters.model import context, evaluate

    q = _text(realdata, "gpud", "nvidia-smi-query.535.161.08.out.0.valid")
    uuid = q.value("gpu:0000:3b:00.0", "uuid")
    text = f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {uuid})\n" + "".join(
        f"         Link {k}: {'<inactive>' if k in (3, 5) else '26.562 GB/s'}\n" for k in range(18))
    merged = q.merged(by_uuid(parse_nvlink_status(text, "nv"), q))
    g = "gpu:0000:3b:00.0"
    assert (merged.value(g, "nvlink_active_links"), merged.value(g, "nvlink_inactive_links")) == (16, 2)
    assert merged.value(g, "nvlink3_down") is True
    found = [f for f in evaluate(counter_rules(), context(merged.observations, {}, 0.0)) if f.kind == "nvlink_down"]
    assert [(f.pci, f.message) for f in found] == [("0000:3b:00.0", "GPU 0000:3b:00.0: 2 NVLink link(s) down")]


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=600))
def test_nvlink_parser_never_crashes(text: str) -> None:
    from minutiae.node.sources.nvidia_smi.parse.nvlink import parse_nvlink_status

    parse_nvlink_status("GPU 0: X (UUID: GPU-12345678-aaaa)\n" + text, "fuzz")


def test_performance_state(realdata: Path) -> None:
    assert _xml(realdata, "3090-v13.xml").value("gpu:0000:09:00.0", "pstate") == 8
    assert _text(realdata, "gpud", "nvidia-smi-query.535.161.08.out.0.valid").value("gpu:0000:19:00.0", "pstate") == 0

"""Real ``nvidia-smi -q -x`` captures vendored in tests/data/nvidia_smi_xml (README.md there):
a DGX-2 V100 with uncorrectable ECC errors and a page retirement pending, and a 4x Tesla K80
Azure VM whose driver writes the old ``<pending_blacklist>`` tag. A clean clone without
../shared still runs the XML parser and the GPU check on datacenter GPUs."""

from __future__ import annotations

from pathlib import Path

from minutiae.model.gpu_metrics import reason_names
from minutiae.model.snapshot import Snapshot
from minutiae.node.check import CheckConfig, CheckMemory, run_check
from minutiae.node.sources.nvidia_smi.parse.xml import parse_nvidia_smi_xml
from minutiae.node.sources.nvidia_smi.read import read_nvidia_smi_file
from minutiae.testing import FakeClock

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia_smi_xml"
V100 = DATA / "nvidia_smi_retired_pages.xml"
K80 = DATA / "nvidia_smi_out_of_order.xml"


def _parse(path: Path) -> Snapshot:
    return parse_nvidia_smi_xml(path.read_bytes(), str(path))


def _rules(path: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """Status and rules of the GPU check, run twice 5 minutes apart (persistent rules alarm)."""
    cfg = CheckConfig(sysfs_root=tmp_path, kmsg=None, nvidia_smi_xml=path, node="n", checks=("gpu",))
    clock, mem = FakeClock(), CheckMemory()
    run_check(cfg, clock, memory=mem)
    clock.advance(300)
    gpu = run_check(cfg, clock, memory=mem).results[0]
    assert gpu.reason is None
    return gpu.status.label, sorted({f.rule for f in gpu.findings if f.rule})


def test_v100_dgx2_ecc_and_retired_pages() -> None:
    s = _parse(V100)
    g = "gpu:0000:34:00.0"
    assert s.problems == ()
    assert s.components("gpu:") == [g]
    # the fixture kept one <gpu> of the 16 the driver reports
    assert (s.value("node", "attached_gpus"), s.value("node", "gpu_count")) == (16, 1)
    assert s.value("node", "driver_version") == "410.104"
    assert s.value(g, "name") == "Tesla V100-SXM3-32GB"
    assert s.value(g, "uuid") == "GPU-ef23ffa6-c9fd-93d5-aeb8-612c087255ff"
    assert s.value(g, "vbios_version") == "88.00.6B.00.01"
    assert (s.value(g, "ecc_sbe_volatile"), s.value(g, "ecc_dbe_volatile")) == (1, 1)
    assert (s.value(g, "ecc_sbe_aggregate"), s.value(g, "ecc_dbe_aggregate")) == (291, 7627)
    assert (s.value(g, "retired_pages_sbe"), s.value(g, "retired_pages_dbe")) == (0, 2)
    assert s.value(g, "retired_pages_pending") is True
    assert (s.value(g, "pcie_gen_current"), s.value(g, "pcie_width_current")) == (3, 16)
    assert (s.value(g, "power_w"), s.value(g, "power_limit_w")) == (50.6, 350.0)
    assert (s.value(g, "temperature_c"), s.value(g, "temperature_slowdown_c")) == (33.0, 89.0)
    assert reason_names(int(s.value(g, "clock_event_reasons") or 0)) == ["gpu_idle"]


def test_v100_dgx2_check_drains_for_dbe_and_pending_retirement(tmp_path: Path) -> None:
    status, rules = _rules(V100, tmp_path)
    assert status == "critical"
    assert rules == ["gpu.count-attached", "gpu.ecc-dbe-volatile", "gpu.retired-pages-pending"]


def test_k80_azure_four_gpus_in_minor_order_of_the_file() -> None:
    s = _parse(K80)
    assert s.problems == ()
    # Hyper-V PCI domains; the file lists minor numbers 1, 2, 3, 0 (components are sorted)
    gpus = ["gpu:1580:00:00.0", "gpu:2df7:00:00.0", "gpu:4968:00:00.0", "gpu:f8d6:00:00.0"]
    assert s.components("gpu:") == gpus
    assert (s.value("node", "attached_gpus"), s.value("node", "gpu_count")) == (4, 4)
    assert {s.value(g, "name") for g in gpus} == {"Tesla K80"}
    assert s.value(gpus[0], "uuid") == "GPU-c3b26f7a-8dcb-619c-fa1b-8029265a4db0"
    assert [s.value(g, "ecc_sbe_aggregate") for g in gpus] == [7, 34, 0, 0]
    assert [s.value(g, "ecc_dbe_aggregate") for g in gpus] == [7, 4, 0, 0]
    assert [s.value(g, "ecc_dbe_volatile") for g in gpus] == [0, 0, 0, 0]
    assert [s.value(g, "retired_pages_dbe") for g in gpus] == [1, 1, 0, 0]
    assert [s.value(g, "power_w") for g in gpus] == [135.72, 139.71, 32.27, 34.44]
    assert [reason_names(int(s.value(g, "clock_event_reasons") or 0)) for g in gpus] == [
        ["applications_clocks_setting"], ["applications_clocks_setting"], ["gpu_idle"], ["gpu_idle"]]


def test_k80_pending_blacklist_tag_is_read_as_the_pending_retirement() -> None:
    # driver 430.26 writes <pending_blacklist>No</pending_blacklist> and no <pending_retirement>:
    # the pending state is observed (False), not missing (fails before the parser read that tag)
    s = _parse(K80)
    assert [s.value(g, "retired_pages_pending") for g in s.components("gpu:")] == [False] * 4


def test_k80_check_is_ok_below_the_retirement_limit(tmp_path: Path) -> None:
    assert _rules(K80, tmp_path) == ("ok", [])


def test_both_are_sniffed_as_xml() -> None:
    assert {read_nvidia_smi_file(p).source for p in (V100, K80)} == {"nvidia-smi-xml"}

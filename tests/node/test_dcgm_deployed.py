"""dcgm-exporter as deployed (issue 16 item 3): MIG scrapes judged per physical GPU, and XIDs
from ``DCGM_EXP_XID_ERRORS_COUNT`` / ``DCGM_FI_DEV_XID_ERRORS`` through the XID catalog.
Scrapes: tests/data/dcgm_scrapes/README.md (real lines from public issue threads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.model.vocab import Action, Severity, Status
from minutiae.node.check import CheckConfig, run_check
from minutiae.node.sources.dcgm.parse import parse_dcgm
from minutiae.testing import FakeClock

DATA = Path(__file__).resolve().parents[1] / "data" / "dcgm_scrapes"


def _values(text: str) -> dict[str, dict[str, object]]:
    snap = parse_dcgm(text, "scrape")
    out: dict[str, dict[str, object]] = {}
    for o in snap.observations:
        out.setdefault(o.component, {})[o.metric] = o.value
    return out


def test_mig_a100_without_pci_label_is_a_gpu_not_unknown() -> None:
    v = _values((DATA / "a100-80gb-mig-7g.prom").read_text())
    assert v["gpu:nvidia0"]["mig_instances"] == 1
    assert v["gpu:nvidia0"]["name"] == "NVIDIA A100 80GB PCIe"
    assert v["node"]["gpu_count"] == 1 and v["node"]["driver_version"] == "535.154.05"


def test_mig_instances_of_one_gpu_are_one_gpu() -> None:
    v = _values((DATA / "h100-nvl-mig-1g.prom").read_text())
    assert set(v) == {"gpu:0000:00:06.0", "node"}
    assert v["gpu:0000:00:06.0"]["mig_instances"] == 2 and v["node"]["gpu_count"] == 1


def test_mixed_mig_node_device_fields_once_per_gpu() -> None:
    v = _values((DATA / "a30-mig-mixed-rtx2000ada.prom").read_text())
    gpus = {c: m for c, m in v.items() if c.startswith("gpu:")}
    assert {c: m["temperature_c"] for c, m in gpus.items()} == {
        "gpu:0000:b1:00.0": 44.0, "gpu:0000:ca:00.0": 45.0, "gpu:0000:65:00.0": 50.0}
    assert "mig_instances" not in gpus["gpu:0000:b1:00.0"]  # the RTX 2000 Ada runs without MIG
    assert gpus["gpu:0000:65:00.0"]["mig_instances"] == 2


# dcgm-exporter's label layout (see the README); values ours.
L = ('gpu="0",UUID="GPU-153bdcb7-df30-40e2-3f2c-379902ba72fa",pci_bus_id="00000000:00:06.0",'
     'device="nvidia0",modelName="NVIDIA H100 NVL",Hostname="gpu001",DCGM_FI_DRIVER_VERSION="535.230.02"')
TEMP = f"# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{{{L}}} 41\n"


def _check(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    f = tmp_path / "metrics.prom"
    f.write_text(text)
    cfg = CheckConfig(dcgm=str(f), kmsg=None, node="gpu001", use_nvml=False,
                      sysfs_root=tmp_path)
    return run_check(cfg, FakeClock()).result("gpu")


def _xids(result) -> list[tuple[int | None, Severity, Action, str | None]]:  # type: ignore[no-untyped-def]
    return [(f.code, f.severity, f.action, f.rule) for f in result.findings if f.kind == "xid"]


def test_xid_count_window_through_the_catalog(tmp_path: Path) -> None:
    text = TEMP + ("# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n"
                   f'DCGM_EXP_XID_ERRORS_COUNT{{{L},window_size_in_ms="300000",xid="13"}} 3\n'
                   f'DCGM_EXP_XID_ERRORS_COUNT{{{L},window_size_in_ms="300000",xid="79"}} 1\n')
    r = _check(tmp_path, text)
    assert _xids(r) == [(79, Severity.CRITICAL, Action.REBOOT, "gpu.dcgm-xid-window")]
    assert r.status is Status.CRITICAL


def test_application_xid_never_drains(tmp_path: Path) -> None:
    text = TEMP + ("# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n"
                   f'DCGM_EXP_XID_ERRORS_COUNT{{{L},window_size_in_ms="300000",xid="43"}} 2\n'
                   f'DCGM_EXP_XID_ERRORS_COUNT{{{L},window_size_in_ms="300000",xid="13"}} 1\n')
    r = _check(tmp_path, text)
    ((code, sev, action, _),) = _xids(r)
    assert code in (13, 43) and not action.drains, (code, sev, action)


def test_xid_42_takes_the_catalog_action(tmp_path: Path) -> None:
    from minutiae.rules.logs import xid_catalog

    text = TEMP + ("# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n"
                   f'DCGM_EXP_XID_ERRORS_COUNT{{{L},window_size_in_ms="300000",xid="42"}} 2\n')
    entry = xid_catalog().get(42)
    assert entry is not None
    assert _xids(_check(tmp_path, text)) == [(42, entry.severity, entry.action, "gpu.dcgm-xid-window")]


def test_no_xid_in_the_window_is_quiet(tmp_path: Path) -> None:
    text = TEMP + ("# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n"
                   f'DCGM_EXP_XID_ERRORS_COUNT{{{L},window_size_in_ms="300000"}} 0\n')
    r = _check(tmp_path, text)
    assert _xids(r) == [] and r.status is Status.OK


def test_last_xid_field_through_the_catalog(tmp_path: Path) -> None:
    text = TEMP + ("# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
                   f'DCGM_FI_DEV_XID_ERRORS{{{L},err_code="48",err_msg="DBE (Double Bit Error) ECC Error"}} 48\n')
    r = _check(tmp_path, text)
    ((code, sev, action, rule),) = _xids(r)
    assert (code, rule) == (48, "gpu.dcgm-last-xid") and action.drains and sev >= Severity.ERROR


# -- more exporter versions and GPU families (README: each file's thread) -----------------------

def test_h100_node_with_one_mig_gpu_and_redacted_uuids() -> None:
    """dcgm-exporter#512: 8x H100 80GB HBM3, GPU 0 in MIG 3g.40gb x2, the others whole; the
    reporter masked every UUID as GPU-********, so GPUs must be told apart by PCI address."""
    v = _values((DATA / "h100-hbm3-mig-and-full-redacted.prom").read_text())
    gpus = {c: m for c, m in v.items() if c.startswith("gpu:")}
    assert sorted(gpus) == ["gpu:0000:1a:00.0", "gpu:0000:40:00.0", "gpu:0000:53:00.0",
                            "gpu:0000:66:00.0"]
    assert gpus["gpu:0000:1a:00.0"]["mig_instances"] == 2
    assert all("mig_instances" not in m for c, m in gpus.items() if c != "gpu:0000:1a:00.0")
    assert v["node"]["gpu_count"] == 4 and v["node"]["driver_version"] == "535.129.03"


def test_mig_instances_with_pod_labels_and_float_values() -> None:
    v = _values((DATA / "h100-hbm3-mig-1g-prof.prom").read_text())
    assert v["gpu:0000:1a:00.0"]["mig_instances"] == 3
    assert v["gpu:0000:1a:00.0"]["name"] == "NVIDIA H100 80GB HBM3"


def test_a_pci_domain_other_than_zero() -> None:
    """A VM's GPU on PCI domain 1 (kubernetes-sigs/dra-driver-nvidia-gpu#166, A100 80GB PCIe,
    MIG 1g.10gb, driver 560.35.03)."""
    v = _values((DATA / "a100-pcie-mig-1g-pci-domain1.prom").read_text())
    assert set(v) == {"gpu:0001:00:00.0", "node"}
    assert v["gpu:0001:00:00.0"]["mig_instances"] == 3


def test_an_older_exporter_without_pci_labels() -> None:
    """dcgm-exporter#250 (2022, main): 4x V100-SXM2, no pci_bus_id label, counters typed
    'counter' without the _total suffix, float values printed %f."""
    v = _values((DATA / "v100-sxm2-no-pci-label.prom").read_text())
    assert {c: m["pcie_replay"] for c, m in v.items() if c.startswith("gpu:")} == {
        "gpu:nvidia0": 0, "gpu:nvidia1": 0, "gpu:nvidia2": 0, "gpu:nvidia3": 0}
    assert v["node"]["gpu_count"] == 4


@pytest.mark.parametrize("name, status", [
    ("v100-sxm2-no-pci-label.prom", Status.OK),
    ("a30-mig-mixed-rtx2000ada.prom", Status.OK),
    # only utilisation/clock/memory fields: nothing measured that says healthy or not
    ("l40s-prof-pod-labels.prom", Status.UNKNOWN),
    ("h100-hbm3-mig-1g-prof.prom", Status.UNKNOWN),
    ("a100-pcie-mig-1g-pci-domain1.prom", Status.UNKNOWN),
    ("a100-80gb-mig-7g.prom", Status.UNKNOWN),
    ("h100-hbm3-mig-and-full-redacted.prom", Status.UNKNOWN),
])
def test_every_real_scrape_through_check(tmp_path: Path, name: str, status: Status) -> None:
    r = _check(tmp_path, (DATA / name).read_text())
    assert r.status is status, (r.status, r.reason)
    if status is Status.UNKNOWN:
        assert r.reason is not None and "no health field" in r.reason


# dcgm-exporter's health collector (gpu_health_collector.go: one sample per GPU and watch,
# labels health_watch / health_error_code, value DCGM's result 0/10/20); values ours.
def _health(watches: dict[str, tuple[int, str]]) -> str:
    lines = ["# TYPE DCGM_EXP_GPU_HEALTH_STATUS gauge"]
    for watch, (value, code) in watches.items():
        lines.append(f'DCGM_EXP_GPU_HEALTH_STATUS{{{L},health_watch="{watch}",'
                     f'health_error_code="{code}"}} {value}')
    return "\n".join(lines) + "\n"


def test_dcgm_health_all_pass_is_ok(tmp_path: Path) -> None:
    r = _check(tmp_path, _health({w: (0, "DCGM_FR_OK") for w in ("PCIE", "NVLINK", "MEM", "SM")}))
    assert r.status is Status.OK and not r.findings


def test_dcgm_health_fail_drains_naming_the_watch(tmp_path: Path) -> None:
    r = _check(tmp_path, _health({"PCIE": (0, "DCGM_FR_OK"),
                                  "MEM": (20, "DCGM_FR_VOLATILE_DBE_DETECTED")}))
    ((f,),) = [[f for f in r.findings if f.kind == "dcgm_health"]]
    assert (f.rule, f.severity, f.action) == ("gpu.dcgm-health-fail", Severity.ERROR, Action.INSPECT)
    assert "MEM: DCGM_FR_VOLATILE_DBE_DETECTED" in f.message and r.status is Status.CRITICAL


def test_dcgm_health_warn_warns(tmp_path: Path) -> None:
    r = _check(tmp_path, _health({"PCIE": (10, "DCGM_FR_PCI_REPLAY_RATE"), "MEM": (0, "DCGM_FR_OK")}))
    assert [(f.rule, f.severity) for f in r.findings] == [("gpu.dcgm-health-warn", Severity.WARNING)]
    assert r.status is Status.WARNING

"""A real H200 node (tests/data/h200, captured live with scripts/device/capture.sh): NVML's
answers replayed, nvidia-smi's captures, its sysfs tree and kernel log, through the same code
that ran there. The three GPU sources must agree value for value, and the check must say what
it said on the node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from minutiae.model.snapshot import Snapshot
from minutiae.node.check import CheckConfig, CheckMemory, run_check
from minutiae.node.result import Status
from minutiae.node.sources.kernel_log.scan import scan_chunks
from minutiae.node.sources.nvidia_smi.parse.text import parse_nvidia_smi_text
from minutiae.node.sources.nvidia_smi.parse.xml import parse_nvidia_smi_xml
from minutiae.node.sources.nvml import read_nvml
from minutiae.testing import FakeClock
from minutiae.testing.fake_nvml import FakeNvml
from minutiae.testing.replay_nvml import MissingCall, ReplayNvml

H200 = Path(__file__).resolve().parents[1] / "data" / "h200"
GPU = "gpu:0000:00:06.0"
#: every value all three sources give for this board (the test fails if one goes missing)
SHARED = {
    "name": "NVIDIA H200", "uuid": "GPU-9d70c580-2f43-c1f4-2bf4-e52546eeebc1",
    "vbios_version": "96.00.A5.00.1A", "driver_version": "580.159.04",
    "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0, "ecc_sbe_aggregate": 0, "ecc_dbe_aggregate": 0,
    "remap_correctable": 0, "remap_uncorrectable": 0, "remap_pending": False, "remap_failure": False,
    "pstate": 0, "clock_event_reasons": 0x1, "temperature_c": 38.0,
    # NVML's slowdown threshold; nvidia-smi gives margins to T.Limit: 38 + 49 - (-2)
    "temperature_slowdown_c": 89.0,
    "power_limit_w": 700.0, "pcie_gen_current": 5, "pcie_gen_max": 5, "pcie_width_current": 16,
    "pcie_width_max": 16, "pcie_replay": 1,
}


def _values(s: Snapshot, comp: str = GPU) -> dict[str, Any]:
    return {o.metric: o.value for o in s.observations if o.component == comp}


def _replay() -> ReplayNvml:
    return ReplayNvml.from_file(H200 / "nvml" / "calls.json")


def _sources() -> dict[str, Snapshot]:
    return {
        "nvml": read_nvml(_replay(), time=0.0),
        "xml": parse_nvidia_smi_xml((H200 / "nvidia-smi-q-x.xml").read_bytes()),
        "text": parse_nvidia_smi_text((H200 / "nvidia-smi-q.txt").read_text()),
    }


@pytest.mark.parametrize("source", ["nvml", "xml", "text"])
def test_every_gpu_source_reads_the_same_board(source: str) -> None:
    snap = _sources()[source]
    got = _values(snap)
    assert snap.problems == ()
    assert {m: got.get(m) for m in SHARED} == SHARED
    # read a few seconds apart: NVML's 1 s average, nvidia-smi's average, instant
    assert got["power_w"] == pytest.approx(81.0, abs=0.5)


def test_replay_reproduces_what_read_nvml_gave_on_the_node() -> None:
    """The recording's own snapshot (made there by the code of that day) is reproduced; what the
    code reads since (the slowdown threshold) comes on top."""
    recorded = json.loads((H200 / "nvml" / "snapshot.json").read_text())
    then = {(c, m): v for c, m, v in recorded["observations"]}
    now = {(o.component, o.metric): o.value for o in read_nvml(_replay(), time=0.0).observations}
    assert {k: now.get(k) for k in then} == then
    assert set(now) - set(then) == {(GPU, "temperature_slowdown_c")}
    assert recorded["problems"] == []


def test_fake_nvml_answers_like_the_real_driver() -> None:
    """The contract of the recording fake: built from this board's nvidia-smi XML, it gives
    read_nvml the same values as the driver's own answers (the power draw differs by when it
    was read)."""
    xml = parse_nvidia_smi_xml((H200 / "nvidia-smi-q-x.xml").read_bytes())
    fake = {(o.component, o.metric): o.value for o in read_nvml(FakeNvml.from_snapshot(xml), 0.0).observations}
    real = {(o.component, o.metric): o.value for o in read_nvml(_replay(), 0.0).observations}
    assert fake.pop((GPU, "power_w")) == pytest.approx(real.pop((GPU, "power_w")), abs=0.5)
    assert fake == real


def test_a_call_the_recording_lacks_is_a_failure_not_a_value() -> None:
    replay = _replay()
    with pytest.raises(MissingCall, match="nvmlDeviceGetHandleByIndex"):
        replay.nvmlDeviceGetHandleByIndex(1)


def test_under_load_the_power_cap_is_not_a_fault() -> None:
    """694 W of 700 W during bf16 matrix products: the SW power cap holds the clocks down
    (1455 MHz of 1980), as on every busy board; no finding, over two checks 10 minutes apart."""
    loaded = H200 / "loaded" / "nvidia-smi-q-x.xml"
    got = _values(parse_nvidia_smi_xml(loaded.read_bytes()))
    assert got["clock_event_reasons"] == 0x4 and got["power_w"] == pytest.approx(694, abs=5)
    cfg = CheckConfig(sysfs_root=H200 / "sysfs" / "sys", kmsg=None, nvidia_smi_xml=loaded,
                      checks=("gpu",), node="h200", expected_gpus=1)
    clock, mem = FakeClock(), CheckMemory()
    for _ in range(2):
        gpu = run_check(cfg, clock, memory=mem).result("gpu")
        assert gpu is not None and gpu.status is Status.OK and gpu.findings == ()
        clock.advance(600)


def _live_config(**kw: Any) -> CheckConfig:
    base: dict[str, Any] = {
        "sysfs_root": H200 / "sysfs" / "sys", "proc_root": H200 / "sysfs" / "proc",
        "kmsg": H200 / "kmsg.txt", "nvml": _replay(), "node": "h200", "year": 2026,
    }
    base.update(kw)
    return CheckConfig(**base)


def test_the_check_says_offline_what_it_said_on_the_node() -> None:
    live = json.loads((H200 / "minutiae" / "check-live.json").read_text())
    r = run_check(_live_config(), FakeClock())
    got = {c.check: c.status.name.lower() for c in r.results}
    # the copy of /proc has no sys/kernel/tainted (sysfs_copy.py did not take it then)
    assert got == {c["check"]: c["status"] for c in live["checks"] if c["check"] != "kernel"}
    assert got["ib"] == "unknown"  # no HCA in this VM: never OK
    assert all(c.findings == () for c in r.results)
    pcie = {c["check"]: c["observed"] for c in live["checks"]}["pcie"]
    assert r.result("pcie").observed == pcie  # type: ignore[union-attr]


def test_the_h200_node_is_healthy_without_the_ib_group() -> None:
    r = run_check(_live_config(checks=("gpu", "pcie", "kernel_log"), expected_gpus=1,
                               expected_driver="580.159.04"), FakeClock())
    assert r.status is Status.OK, [(c.check, c.reason) for c in r.results]


def test_a_second_gpu_expected_is_critical() -> None:
    r = run_check(_live_config(checks=("gpu",), expected_gpus=2), FakeClock())
    gpu = r.result("gpu")
    assert gpu is not None and gpu.status is Status.CRITICAL


@pytest.mark.parametrize("name", ["kmsg.txt", "dmesg.txt"])
def test_a_healthy_h200_boot_log_has_no_finding(name: str) -> None:
    """NVRM's boot lines on this board ("FBHUB Interrupt detected. Clearing it.", persistence
    mode deprecated, the open module loading) and the VM's own boot are no fault."""
    data = (H200 / name).read_bytes()
    assert b"NVRM: gpuClearFbhubPoisonIntrForBug2924523_GA100: FBHUB Interrupt detected" in data
    assert list(scan_chunks([data], year=2026)) == []


def test_second_board_offline_equals_live_with_the_taint_flags() -> None:
    """node2: another H200 (another UUID), recorded with the NVML source that reads the slowdown
    threshold and a /proc copy that holds the taint flags (4096: out-of-tree module, the driver).
    Its kernel log was read live from /dev/kmsg and not kept, so that group is left out."""
    node2 = H200 / "node2"
    live = json.loads((node2 / "minutiae" / "check-live.json").read_text())
    cfg = _live_config(sysfs_root=node2 / "sysfs" / "sys", proc_root=node2 / "sysfs" / "proc",
                       kmsg=None, nvml=ReplayNvml.from_file(node2 / "nvml" / "calls.json"))
    r = run_check(cfg, FakeClock())
    got = {c.check: (c.status.name.lower(), c.observed) for c in r.results}
    assert got == {c["check"]: (c["status"], c["observed"]) for c in live["checks"]
                   if c["check"] != "kernel_log"}
    values = _values(read_nvml(ReplayNvml.from_file(node2 / "nvml" / "calls.json"), 0.0))
    assert values["temperature_slowdown_c"] == 89.0 and values["uuid"] != SHARED["uuid"]

"""NVML source through the recording fake (values from real captures) and the real pynvml."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from minutiae.errors import SourceUnavailable
from minutiae.model.snapshot import Snapshot
from minutiae.node.sources.nvidia_smi.parse.text import parse_nvidia_smi_text
from minutiae.node.sources.nvml import read_nvml
from minutiae.testing.fake_nvml import FakeNvml

H100 = ("nvidia_smi", "gpud", "nvidia-smi-query.535.161.08.out.0.valid")


@pytest.fixture()
def h100(realdata: Path) -> Snapshot:
    path = realdata.joinpath(*H100)
    return parse_nvidia_smi_text(path.read_text(), str(path))


def _values(s: Snapshot) -> dict[tuple[str, str], object]:
    return {(o.component, o.metric): o.value for o in s.observations}


def test_nvml_path_gives_the_same_values_as_the_capture(h100: Snapshot) -> None:
    fake = FakeNvml.from_snapshot(h100)
    got = _values(read_nvml(fake))
    want = _values(h100)
    # nvidia-smi -q has two fields NVML reads elsewhere (attached count, reset status)
    skip = {k for k in want if k[1] in ("attached_gpus", "reset_required")}
    assert {k: v for k, v in want.items() if k not in skip} == {k: got.get(k) for k in want if k not in skip}
    assert got[("gpu:0000:19:00.0", "pcie_replay")] == 67
    assert got[("gpu:0000:19:00.0", "clock_event_reasons")] == 0x88
    assert got[("node", "gpu_count")] == 8
    assert fake.calls[0] == ("nvmlInit", ()) and fake.calls[-1] == ("nvmlShutdown", ())


def test_library_not_found_is_unavailable_with_nvmls_text(h100: Snapshot) -> None:
    fake = FakeNvml.from_snapshot(h100, init_error=12)
    with pytest.raises(SourceUnavailable) as exc:
        read_nvml(fake)
    assert exc.value.reason == "NVML Shared Library Not Found"
    assert [c[0] for c in fake.calls] == ["nvmlInit"]


def test_real_pynvml_without_a_driver() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on a machine with an NVIDIA driver
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML")
    with pytest.raises(SourceUnavailable, match="NVML Shared Library Not Found"):
        read_nvml(pynvml)


def test_lost_gpu_and_failing_call_are_problems(h100: Snapshot) -> None:
    fake = FakeNvml.from_snapshot(h100, lost={3}, errors={(5, "nvmlDeviceGetTotalEccErrors"): 999})
    s = read_nvml(fake)
    assert s.value("node", "gpu_count") == 8
    assert len(s.components("gpu:0000")) == 7  # GPU 3 could not be opened
    assert s.value("gpu:index3", "lost") is True  # a known fault, not an unreadable value
    assert not [p for p in s.problems if p.where.startswith("GPU 3")]
    ecc = [p for p in s.problems if "nvmlDeviceGetTotalEccErrors" in p.where]
    assert len(ecc) == 4 and ecc[0].message == "Unknown Error"
    assert s.value("gpu:0000:bb:00.0", "ecc_dbe_volatile") is None  # GPU index 5


def test_not_supported_is_skipped_silently(h100: Snapshot) -> None:
    fake = FakeNvml.from_snapshot(h100)
    for g in fake.gpus:
        g.values.pop("retired_pages_sbe", None)  # H100: page retirement replaced by row remap
    s = read_nvml(fake)
    assert s.problems == ()
    assert s.value("gpu:0000:19:00.0", "retired_pages_sbe") is None


def test_nvlink_state_and_errors(h100: Snapshot) -> None:
    fake = FakeNvml.from_snapshot(h100)
    fake.gpus[0].nvlink_states = [1] * 17 + [0]
    fake.gpus[0].nvlink_errors = {(3, 2): 7, (4, 0): 5}
    fake.gpus[1].nvlink_states = [1] * 18
    s = read_nvml(fake)
    g0, g1 = "gpu:0000:19:00.0", "gpu:0000:3b:00.0"
    assert (s.value(g0, "nvlink_active_links"), s.value(g0, "nvlink_inactive_links")) == (17, 1)
    assert s.value(g0, "nvlink17_down") is True
    assert s.value(g0, "nvlink_errors") == 12
    assert (s.value(g1, "nvlink_active_links"), s.value(g1, "nvlink_errors")) == (18, 0)
    assert s.value("gpu:0000:4c:00.0", "nvlink_active_links") is None  # no NVLink reported


def test_lost_gpu_drains_the_node(h100: Snapshot, tmp_path: Path) -> None:
    from minutiae.model import Action, Status
    from minutiae.node.check import CheckConfig, run_check
    from minutiae.testing import FakeClock

    fake = FakeNvml.from_snapshot(h100, lost={6})
    r = run_check(CheckConfig(sysfs_root=tmp_path, kmsg=None, nvml=fake, node="n", checks=("gpu",),
                              expected_gpus=8), FakeClock())
    gpu = r.result("gpu")
    assert gpu is not None and gpu.status is Status.CRITICAL
    assert [(f.kind, f.component, f.action) for f in gpu.findings if f.severity >= 3] == [
        ("gpu_off_bus", "gpu:index6", Action.REBOOT)]
    assert r.drain

"""A recording fake of the ``pynvml`` calls in ``minutiae.node.sources.nvml.NvmlApi``.

Values come from a real capture: ``FakeNvml.from_snapshot(parse_nvidia_smi_xml(...))`` turns
the observations of an ``nvidia-smi -q -x`` (or ``-q``) capture back into what NVML would return
for those GPUs, so NVML-path tests run on real numbers. Errors are the real ``pynvml.NVMLError``
subclasses (their text is NVML's, e.g. ``NVML Shared Library Not Found``):

- ``init_error=12``: ``nvmlInit`` fails (no driver/library);
- ``errors={(gpu_index, "nvmlDeviceGetX"): code}``: one call on one GPU fails;
- ``lost={index}``: the GPU cannot be opened (fell off the bus).

Every call is recorded in ``calls`` as ``(name, args)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

from minutiae.model.snapshot import Snapshot

NOT_SUPPORTED = 3
GPU_IS_LOST = 15
LIBRARY_NOT_FOUND = 12


@dataclass
class FakeGpu:
    pci: str  # NVML form, e.g. 00000000:19:00.0
    values: dict[str, Any] = field(default_factory=dict)  # metric -> value (common vocabulary)
    nvlink_states: list[int] = field(default_factory=list)
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)


class FakeNvml:
    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu],
        driver: str = "535.161.08",
        *,
        init_error: int | None = None,
        errors: dict[tuple[int, str], int] | None = None,
        lost: set[int] | None = None,
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.init_error = init_error
        self.errors = dict(errors or {})
        self.lost = set(lost or ())
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.initialised = False

    @classmethod
    def from_snapshot(cls, snap: Snapshot, **kwargs: Any) -> FakeNvml:
        gpus: list[FakeGpu] = []
        for comp in snap.components("gpu:"):
            pci = comp.split(":", 1)[1]
            values = {o.metric: o.value for o in snap.observations if o.component == comp}
            gpus.append(FakeGpu(pci="0000" + pci, values=values))
        driver = str(snap.value("node", "driver_version") or "535.161.08")
        return cls(gpus, driver, **kwargs)

    # -- helpers -------------------------------------------------------------------------------
    def _rec(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def _gpu(self, name: str, handle: Any) -> FakeGpu:
        self._rec(name, handle)
        index = int(handle)
        if (index, name) in self.errors:
            raise pynvml.NVMLError(self.errors[(index, name)])
        return self.gpus[index]

    def _value(self, name: str, handle: Any, metric: str) -> Any:
        gpu = self._gpu(name, handle)
        if metric not in gpu.values:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        return gpu.values[metric]

    # -- the NvmlApi calls ---------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._rec("nvmlInit")
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._rec("nvmlShutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._rec("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._rec("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._rec("nvmlDeviceGetHandleByIndex", index)
        if index in self.lost:
            raise pynvml.NVMLError(GPU_IS_LOST)
        return index

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        gpu = self._gpu("nvmlDeviceGetPciInfo", handle)
        return SimpleNamespace(busId=gpu.pci.encode())

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return str(self._value("nvmlDeviceGetName", handle, "name"))

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return str(self._value("nvmlDeviceGetUUID", handle, "uuid"))

    def nvmlDeviceGetVbiosVersion(self, handle: Any) -> str:
        return str(self._value("nvmlDeviceGetVbiosVersion", handle, "vbios_version"))

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        metric = f"ecc_{'sbe' if error_type == 0 else 'dbe'}_{'volatile' if counter_type == 0 else 'aggregate'}"
        return int(self._value("nvmlDeviceGetTotalEccErrors", handle, metric))

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        gpu = self._gpu("nvmlDeviceGetRemappedRows", handle)
        v = gpu.values
        if "remap_correctable" not in v:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        return (int(v["remap_correctable"]), int(v.get("remap_uncorrectable", 0)),
                int(bool(v.get("remap_pending"))), int(bool(v.get("remap_failure"))))

    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> list[int]:
        n = int(self._value("nvmlDeviceGetRetiredPages", handle, "retired_pages_sbe" if cause == 0 else "retired_pages_dbe"))
        return [0x1000 * (i + 1) for i in range(n)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        return int(bool(self._value("nvmlDeviceGetRetiredPagesPendingStatus", handle, "retired_pages_pending")))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetCurrentClocksEventReasons", handle, "clock_event_reasons"))

    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetPerformanceState", handle, "pstate"))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return int(self._value("nvmlDeviceGetTemperature", handle, "temperature_c"))

    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int:
        if threshold != 1:  # only NVML_TEMPERATURE_THRESHOLD_SLOWDOWN is modelled
            self._gpu("nvmlDeviceGetTemperatureThreshold", handle)
            raise pynvml.NVMLError(NOT_SUPPORTED)
        return round(float(self._value("nvmlDeviceGetTemperatureThreshold", handle, "temperature_slowdown_c")))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return round(float(self._value("nvmlDeviceGetPowerUsage", handle, "power_w")) * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return round(float(self._value("nvmlDeviceGetEnforcedPowerLimit", handle, "power_limit_w")) * 1000)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetCurrPcieLinkGeneration", handle, "pcie_gen_current"))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetMaxPcieLinkGeneration", handle, "pcie_gen_max"))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetCurrPcieLinkWidth", handle, "pcie_width_current"))

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetMaxPcieLinkWidth", handle, "pcie_width_max"))

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetPcieReplayCounter", handle, "pcie_replay"))

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        gpu = self._gpu("nvmlDeviceGetNvLinkState", handle)
        if link >= len(gpu.nvlink_states):
            raise pynvml.NVMLError(NOT_SUPPORTED if not gpu.nvlink_states else 2)
        return gpu.nvlink_states[link]

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int:
        gpu = self._gpu("nvmlDeviceGetNvLinkErrorCounter", handle)
        return gpu.nvlink_errors.get((link, counter), 0)

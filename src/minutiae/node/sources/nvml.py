"""GPU health through NVML (nvidia-ml-py's ``pynvml`` module, injected).

``read_nvml(api)`` emits the metrics of ``minutiae.model.gpu_metrics`` for every GPU.
``api`` is anything with the calls in ``NvmlApi`` (the real ``pynvml`` module, or
``minutiae.testing.fake_nvml.FakeNvml``). Failures:

- ``nvmlInit`` fails (no driver, no ``libnvidia-ml.so``): ``SourceUnavailable`` whose reason is
  the NVMLError text, e.g. ``NVML Shared Library Not Found`` — the GPU check is UNKNOWN and the
  other checks still run.
- a call a GPU does not support (``Not Supported``) is skipped; any other NVMLError on a field
  (``Unknown Error``…) becomes a ``Problem`` naming the GPU and the call;
- a GPU the driver counts but NVML reports as ``GPU is lost`` (fell off the bus) becomes
  ``gpu:index<N> lost = True`` — a fault the ``gpu.lost`` rule turns into ``gpu_off_bus``.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from typing import Any, Protocol

from minutiae.errors import SourceUnavailable
from minutiae.model.gpu_metrics import gpu_component, normalize_pci
from minutiae.model.snapshot import Snapshot, SnapshotBuilder

SOURCE = "nvml"

# NVML constants (stable ABI values, also exported by pynvml)
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
VOLATILE_ECC, AGGREGATE_ECC = 0, 1
CORRECTED, UNCORRECTED = 0, 1
TEMPERATURE_GPU = 0
TEMPERATURE_THRESHOLD_SLOWDOWN = 1  # NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
PAGE_RETIREMENT_SBE, PAGE_RETIREMENT_DBE = 0, 1
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS is 36 in new headers; H100 has 18 links
NVLINK_ERROR_COUNTERS = (0, 1, 2, 3)  # DL replay, recovery, CRC flit, CRC data


class NvmlApi(Protocol):
    """The subset of ``pynvml`` minutiae calls (names as in nvidia-ml-py)."""

    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetVbiosVersion(self, handle: Any) -> str: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> list[int]: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int: ...
    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int: ...
    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int: ...


def load_pynvml() -> NvmlApi:
    """The real ``pynvml`` module (imported lazily so the agent starts without it)."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:  # nvidia-ml-py not installed
        raise SourceUnavailable(SOURCE, f"nvidia-ml-py not installed ({exc})") from None


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _code(exc: Exception) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def read_nvml(api: NvmlApi, time: float | None = None) -> Snapshot:
    """Read every GPU through ``api``. Raises ``SourceUnavailable`` when NVML cannot start."""
    err = api.NVMLError
    try:
        api.nvmlInit()
    except err as exc:
        raise SourceUnavailable(SOURCE, str(exc) or "nvmlInit failed") from None
    b = SnapshotBuilder(SOURCE, time)
    try:
        _read_all(api, b)
    finally:
        with contextlib.suppress(err):
            api.nvmlShutdown()
    return b.build()


def _read_all(api: NvmlApi, b: SnapshotBuilder) -> None:
    err = api.NVMLError
    try:
        driver = _text(api.nvmlSystemGetDriverVersion())
        b.add("node", "driver_version", driver)
    except err as exc:
        driver = ""
        b.problem("node", "nvmlSystemGetDriverVersion", str(exc))
    try:
        count = int(api.nvmlDeviceGetCount())
    except err as exc:
        b.problem("node", "nvmlDeviceGetCount", str(exc))
        return
    b.add("node", "gpu_count", count)
    for index in range(count):
        try:
            handle = api.nvmlDeviceGetHandleByIndex(index)
            bus = _text(api.nvmlDeviceGetPciInfo(handle).busId)
        except err as exc:
            # a GPU that fell off the bus is counted by the driver but cannot be opened: that is
            # a fault we know about (``lost``), not just a value we could not read
            if _code(exc) == NVML_ERROR_GPU_IS_LOST:
                b.add(f"gpu:index{index}", "lost", True)
            else:
                b.problem(f"gpu:index{index}", f"GPU {index}: nvmlDeviceGetHandleByIndex", str(exc))
            continue
        pci = normalize_pci(bus)
        if pci is None:
            b.problem(f"gpu:index{index}", f"GPU {index}: nvmlDeviceGetPciInfo", f"invalid bus id {bus!r}")
            continue
        _read_gpu(api, b, handle, gpu_component(pci), f"GPU {index} ({pci})", driver)


class _Gpu:
    """One GPU being read: its handle, component and the NVML call wrapper."""

    def __init__(self, api: NvmlApi, b: SnapshotBuilder, h: Any, comp: str, where: str) -> None:
        self.api, self.b, self.h, self.comp, self.where = api, b, h, comp, where

    def call(self, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()``; None when this GPU or pynvml does not support it, or (and a problem) when
        it fails."""
        try:
            return fn()
        except self.api.NVMLError as exc:
            if _code(exc) not in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND):
                self.b.problem(self.comp, f"{self.where}: {name}", str(exc))
            return None
        except AttributeError:  # older pynvml without this call
            return None

    def add(self, metric: str, value: Any) -> None:
        if value is not None:
            self.b.add(self.comp, metric, value)


def _read_gpu(api: NvmlApi, b: SnapshotBuilder, h: Any, comp: str, where: str, driver: str) -> None:
    g = _Gpu(api, b, h, comp, where)
    if driver:
        b.add(comp, "driver_version", driver)
    for metric, name, fn in (
        ("name", "nvmlDeviceGetName", lambda: _text(api.nvmlDeviceGetName(h))),
        ("uuid", "nvmlDeviceGetUUID", lambda: _text(api.nvmlDeviceGetUUID(h))),
        ("vbios_version", "nvmlDeviceGetVbiosVersion", lambda: _text(api.nvmlDeviceGetVbiosVersion(h))),
    ):
        g.add(metric, g.call(name, fn))
    _read_memory(g)
    _read_state(g)
    _read_nvlink(api, b, h, comp, where)


def _read_memory(g: _Gpu) -> None:
    """ECC counters, row remapping, retired pages."""
    api, h = g.api, g.h
    for scope, counter in (("volatile", VOLATILE_ECC), ("aggregate", AGGREGATE_ECC)):
        for kind, etype in (("sbe", CORRECTED), ("dbe", UNCORRECTED)):
            v = g.call(
                "nvmlDeviceGetTotalEccErrors",
                lambda e=etype, c=counter: api.nvmlDeviceGetTotalEccErrors(h, e, c),  # type: ignore[misc]
            )
            g.add(f"ecc_{kind}_{scope}", None if v is None else int(v))
    rows = g.call("nvmlDeviceGetRemappedRows", lambda: api.nvmlDeviceGetRemappedRows(h))
    if rows is not None:
        corr, unc, pending, failure = rows
        g.add("remap_correctable", int(corr))
        g.add("remap_uncorrectable", int(unc))
        g.add("remap_pending", bool(pending))
        g.add("remap_failure", bool(failure))
    for metric, cause in (("retired_pages_sbe", PAGE_RETIREMENT_SBE), ("retired_pages_dbe", PAGE_RETIREMENT_DBE)):
        pages = g.call("nvmlDeviceGetRetiredPages", lambda c=cause: api.nvmlDeviceGetRetiredPages(h, c))  # type: ignore[misc]
        g.add(metric, None if pages is None else len(pages))
    pending_pages = g.call(
        "nvmlDeviceGetRetiredPagesPendingStatus", lambda: api.nvmlDeviceGetRetiredPagesPendingStatus(h)
    )
    g.add("retired_pages_pending", None if pending_pages is None else bool(pending_pages))


def _read_state(g: _Gpu) -> None:
    """Performance state, clock-event reasons, temperature, power, PCIe link."""
    api, h = g.api, g.h
    pstate = g.call("nvmlDeviceGetPerformanceState", lambda: api.nvmlDeviceGetPerformanceState(h))
    if pstate is not None and 0 <= int(pstate) <= 15:  # 32 = NVML_PSTATE_UNKNOWN
        g.add("pstate", int(pstate))
    reasons = g.call("nvmlDeviceGetCurrentClocksEventReasons", lambda: api.nvmlDeviceGetCurrentClocksEventReasons(h))
    g.add("clock_event_reasons", None if reasons is None else int(reasons))
    temp = g.call("nvmlDeviceGetTemperature", lambda: api.nvmlDeviceGetTemperature(h, TEMPERATURE_GPU))
    g.add("temperature_c", None if temp is None else float(temp))
    slow = g.call("nvmlDeviceGetTemperatureThreshold",
                  lambda: api.nvmlDeviceGetTemperatureThreshold(h, TEMPERATURE_THRESHOLD_SLOWDOWN))
    g.add("temperature_slowdown_c", None if slow is None else float(slow))
    for metric, name in (("power_w", "nvmlDeviceGetPowerUsage"), ("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit")):
        mw = g.call(name, lambda n=name: getattr(api, n)(h))  # type: ignore[misc]
        g.add(metric, None if mw is None else int(mw) / 1000.0)
    for metric, name in (
        ("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
        ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
        ("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
        ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
        ("pcie_replay", "nvmlDeviceGetPcieReplayCounter"),
    ):
        v = g.call(name, lambda n=name: getattr(api, n)(h))  # type: ignore[misc]
        g.add(metric, None if v is None else int(v))


def _read_nvlink(api: NvmlApi, b: SnapshotBuilder, h: Any, comp: str, where: str) -> None:
    err = api.NVMLError
    active = inactive = errors = 0
    supported = False
    for link in range(NVLINK_MAX_LINKS):
        try:
            state = api.nvmlDeviceGetNvLinkState(h, link)
        except err as exc:
            code = _code(exc)
            if code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_FUNCTION_NOT_FOUND):
                continue  # link index beyond this GPU's links, or no NVLink at all
            b.problem(comp, f"{where}: nvmlDeviceGetNvLinkState({link})", str(exc))
            continue
        supported = True
        if state:
            active += 1
        else:
            inactive += 1
            b.add(comp, f"nvlink{link}_down", True)
        for counter in NVLINK_ERROR_COUNTERS:
            try:
                errors += int(api.nvmlDeviceGetNvLinkErrorCounter(h, link, counter))
            except err:
                continue
    if supported:
        b.add(comp, "nvlink_active_links", active)
        b.add(comp, "nvlink_inactive_links", inactive)
        b.add(comp, "nvlink_errors", errors)

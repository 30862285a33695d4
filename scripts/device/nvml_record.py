"""Record every NVML call minutiae's NVML source makes on this node (and a few it may make
later), with what the real driver answered, so tests can replay a real GPU without one.

Usage: PYTHONPATH=src python3 nvml_record.py OUT_DIR

Writes OUT_DIR/nvml_calls.json (one entry per call: name, arguments with the device handle
replaced by the GPU index, the result or the NVMLError code and text), OUT_DIR/nvml_snapshot.json
(``read_nvml`` on the real pynvml: observations and problems) and OUT_DIR/nvml_timing.json
(wall time of ``read_nvml`` over repeated reads).
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys
import time
from typing import Any

import pynvml

from minutiae.node.sources.nvml import read_nvml

EXTRA = (  # calls read_nvml does not make today, recorded for later sources and tests
    ("nvmlDeviceGetMemoryInfo", ()), ("nvmlDeviceGetUtilizationRates", ()),
    ("nvmlDeviceGetClockInfo", (0,)), ("nvmlDeviceGetClockInfo", (1,)), ("nvmlDeviceGetClockInfo", (2,)),
    ("nvmlDeviceGetMaxClockInfo", (0,)), ("nvmlDeviceGetMaxClockInfo", (2,)),
    ("nvmlDeviceGetPowerManagementLimit", ()), ("nvmlDeviceGetPowerManagementDefaultLimit", ()),
    ("nvmlDeviceGetPersistenceMode", ()), ("nvmlDeviceGetComputeMode", ()), ("nvmlDeviceGetMigMode", ()),
    ("nvmlDeviceGetSerial", ()), ("nvmlDeviceGetBoardPartNumber", ()), ("nvmlDeviceGetMinorNumber", ()),
    ("nvmlDeviceGetEccMode", ()), ("nvmlDeviceGetCurrentClocksThrottleReasons", ()),
    ("nvmlDeviceGetSupportedClocksEventReasons", ()), ("nvmlDeviceGetTotalEnergyConsumption", ()),
    ("nvmlDeviceGetTemperatureThreshold", (0,)), ("nvmlDeviceGetTemperatureThreshold", (1,)),
    ("nvmlDeviceGetFanSpeed", ()), ("nvmlDeviceGetPcieThroughput", (0,)), ("nvmlDeviceGetNumaNodeId", ()),
    ("nvmlDeviceGetArchitecture", ()), ("nvmlDeviceGetCudaComputeCapability", ()),
    ("nvmlDeviceGetGpuFabricInfo", ()), ("nvmlDeviceGetNvLinkRemotePciInfo", (0,)),
)


def plain(value: Any) -> Any:
    """A JSON-able copy of an NVML result (ctypes structs become dicts)."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, ctypes.Structure):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes.Array):
        return [plain(v) for v in value]
    return repr(value)


class Recorder:
    """Forwards to pynvml, recording each call; handles are replaced by their GPU index."""

    NVMLError = pynvml.NVMLError

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.index_of: dict[int, int] = {}

    def __getattr__(self, name: str) -> Any:
        fn = getattr(pynvml, name)

        def call(*args: Any) -> Any:
            shown = [self.index_of.get(id(a), plain(a)) if i == 0 and not isinstance(a, int)
                     else plain(a) for i, a in enumerate(args)]
            entry: dict[str, Any] = {"call": name, "args": shown}
            try:
                result = fn(*args)
            except pynvml.NVMLError as exc:
                entry.update(error=getattr(exc, "value", None), text=str(exc))
                self.calls.append(entry)
                raise
            if name == "nvmlDeviceGetHandleByIndex":
                self.index_of[id(result)] = args[0]
                self._handles = getattr(self, "_handles", []) + [result]  # keep ids stable
                entry["result"] = f"<handle {args[0]}>"
            else:
                entry["result"] = plain(result)
            self.calls.append(entry)
            return result

        return call


def extra(rec: Recorder) -> None:
    rec.nvmlInit()
    try:
        for i in range(rec.nvmlDeviceGetCount()):
            h = rec.nvmlDeviceGetHandleByIndex(i)
            for name, args in EXTRA:
                try:
                    rec.__getattr__(name)(h, *args)
                except (pynvml.NVMLError, AttributeError, TypeError):
                    continue
    finally:
        rec.nvmlShutdown()


def main(out: str) -> int:
    os.makedirs(out, exist_ok=True)
    rec = Recorder()
    snap = read_nvml(rec, time=0.0)
    extra(rec)
    with open(os.path.join(out, "nvml_calls.json"), "w") as f:
        json.dump(rec.calls, f, indent=1)
    with open(os.path.join(out, "nvml_snapshot.json"), "w") as f:
        json.dump({"observations": [[o.component, o.metric, o.value] for o in snap.observations],
                   "problems": [[p.component, p.where, p.message] for p in snap.problems]}, f, indent=1)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        read_nvml(pynvml)
        times.append(time.perf_counter() - t0)
    with open(os.path.join(out, "nvml_timing.json"), "w") as f:
        json.dump({"reads": len(times), "median_s": statistics.median(times), "max_s": max(times),
                   "min_s": min(times)}, f, indent=1)
    print(f"nvml_record: {len(rec.calls)} calls, {len(snap.observations)} observations, "
          f"{len(snap.problems)} problems, read_nvml median {statistics.median(times) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

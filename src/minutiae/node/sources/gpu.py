"""What the GPU sources (NVML, nvidia-smi, DCGM) share: their group, the counter-rule components
they deliver, and how a GPU source that cannot be read is reported."""

from __future__ import annotations

from minutiae.errors import MinutiaeError, SourceUnavailable
from minutiae.model import Action, CheckResult, Finding, Severity, Status
from minutiae.node.result import unknown
from minutiae.node.sources.base import Reading

GROUP = "gpu"
#: node-level rules (GPU count, driver version) compare the configuration with the GPUs: the
#: gpu check reports them
COMPONENTS = ("gpu", "node")

#: NVML's texts for NVML_ERROR_LIB_RM_VERSION_MISMATCH (18; pynvml's, then nvidia-smi's): the
#: user-space library and the kernel module disagree (upgraded without a reboot) — a node fault
NVML_VERSION_MISMATCH = ("NVML/RM version mismatch", "Driver/library version mismatch")


def unreadable(exc: MinutiaeError) -> Reading:
    """The gpu check when a GPU source failed: UNKNOWN with the reason, except a driver/library
    version mismatch, which is a CRITICAL ``driver_mismatch`` finding (reboot)."""
    if isinstance(exc, SourceUnavailable):
        if any(text in exc.reason for text in NVML_VERSION_MISMATCH):
            f = Finding("driver_mismatch", Severity.CRITICAL, Action.REBOOT,
                        f"NVML: {exc.reason} (driver upgraded without a reboot)", rule="nvml.init")
            return Reading(result=CheckResult(GROUP, Status.CRITICAL, (f,), exc.reason, 0))
        return Reading(result=unknown(GROUP, f"{exc.source}: {exc.reason}"))
    return Reading(result=unknown(GROUP, str(exc)))

"""The stable vocabulary of DESIGN.md: severities, actions, Nagios statuses and finding kinds.

These names are a contract with scripts outside the project: extend, never rename.
"""

from __future__ import annotations

from enum import IntEnum


class _Labelled(IntEnum):
    """An ordered enum whose JSON form is its lower-case name."""

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> _Labelled:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            names = ", ".join(m.label for m in cls)
            raise ValueError(f"unknown {cls.__name__.lower()} {text!r} (one of: {names})") from None

    def __str__(self) -> str:
        return self.label


class Severity(_Labelled):
    """How bad a finding is: info < warning < error < critical."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    CRITICAL = 3


class Action(_Labelled):
    """What the node needs (NVIDIA's resolution buckets in our words), ordered.

    A node whose findings need ``RESET_GPU`` or more is drained until remediated.
    """

    NONE = 0
    RESTART_APP = 1
    RESET_GPU = 2
    REBOOT = 3
    INSPECT = 4

    @property
    def drains(self) -> bool:
        return self >= Action.RESET_GPU


class Status(_Labelled):
    """Nagios status; the value is the exit code of one-shot commands."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3

    @staticmethod
    def worst(statuses: list[Status]) -> Status:
        """UNKNOWN outranks WARNING but not CRITICAL (a known critical is worse)."""
        if not statuses:
            return Status.OK
        if Status.CRITICAL in statuses:
            return Status.CRITICAL
        if Status.UNKNOWN in statuses:
            return Status.UNKNOWN
        return max(statuses)


# Finding kinds from DESIGN.md (kernel-log events, then counter/NVML kinds). Add freely.
LOG_KINDS = frozenset(
    {
        "xid", "sxid", "gpu_off_bus", "gsp_timeout", "gpu_reset_required", "gpu_init_failed",
        "nvlink_error", "fabric_manager", "pcie_aer", "mce", "edac_ce", "edac_ue",
        "soft_lockup", "hard_lockup", "hung_task", "nfs_timeout", "oom_kill", "nic_error",
        "ib_link", "fs_error",
    }
)
COUNTER_KINDS = frozenset(
    {
        "ecc_sbe", "ecc_dbe", "row_remap_pending", "row_remap_failure", "retired_pages",
        "throttle", "pcie_link_degraded", "pcie_replay", "nvlink_down", "nvlink_errors",
        "gpu_missing", "ib_port_down", "ib_rate_degraded", "ib_symbol_errors", "ib_link_downed",
        "ib_rcv_errors", "temperature", "driver_mismatch",
    }
)
# Kinds added by minutiae beyond DESIGN.md (topology checks, extra counters and log rules).
EXTRA_KINDS = frozenset(
    {
        "gpu_without_local_nic", "numa_unbalanced", "firmware_mismatch", "nic_missing",
        "nic_pairing_mismatch", "nvme_missing", "kernel_mismatch", "gpu_model_mismatch",
        "ib_transport_errors", "ib_link_recovery", "kernel_panic", "kernel_bug", "peermem_error",
        "unknown_source", "dcgm_health", "ib_port_disabled",
    }
)

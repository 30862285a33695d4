"""The node sources, one line each, in the order they run (and their groups are shown).

To add a source: write its module (a ``NodeSource``: see ``base.py`` and README.md) and add
its line here."""

from __future__ import annotations

from minutiae.node.sources.base import NodeSource
from minutiae.node.sources.dcgm.source import DCGM
from minutiae.node.sources.ib.source import IBSTAT, SYSFS_IB
from minutiae.node.sources.ibv_devinfo.source import IBV_DEVINFO
from minutiae.node.sources.kernel_log.source import KMSG
from minutiae.node.sources.nvidia_smi.source import NVIDIA_SMI, NVLINK
from minutiae.node.sources.nvml_source import NVML
from minutiae.node.sources.pcie.source import PCIE
from minutiae.node.sources.perfquery.source import PERFQUERY
from minutiae.node.sources.taint.source import TAINT
from minutiae.node.sources.uptime.source import UPTIME_SOURCE

REGISTRY: tuple[NodeSource, ...] = (
    UPTIME_SOURCE,  # node.uptime_s for the counter rules' boot grace
    NVIDIA_SMI,     # gpu: an nvidia-smi capture
    DCGM,           # gpu: dcgm-exporter
    NVML,           # gpu: NVML, when no capture is given
    NVLINK,         # gpu: NVLink states from a capture, matched by UUID
    IBSTAT,         # ib: an ibstat/ibstatus capture
    PERFQUERY,      # ib: a perfquery -x capture (port error counters)
    IBV_DEVINFO,    # ib: an ibv_devinfo capture (port state, MTU, link layer)
    SYSFS_IB,       # ib: sysfs, when no capture is given
    PCIE,           # pcie: sysfs
    KMSG,           # kernel_log: /dev/kmsg or a file
    TAINT,          # kernel: taint flags (a machine check, an OOPS since boot)
)

#: the check groups, in display order (what ``--checks`` accepts)
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(s.group for s in REGISTRY if s.group is not None))


def by_name(name: str) -> NodeSource:
    """The registered source called ``name`` (KeyError if none)."""
    for s in REGISTRY:
        if s.name == name:
            return s
    raise KeyError(name)

"""``/proc/sys/kernel/tainted`` (pure): the kernel's taint flags since boot, as observations.

The file holds one decimal number, a bitmask (Documentation/admin-guide/tainted-kernels.rst).
The flags a GPU node's health cares about are kept as booleans beside the raw mask:

- bit 4, ``M``: a processor reported a machine check exception. On x86, ``do_machine_check``
  taints for an uncorrected or signalled MCE (corrected errors found by polling do not), and it
  stays set until the next boot, so it catches an MCE whose kernel-log lines the agent never saw
  (logged before it started, or rotated out of the ring buffer);
- bit 7, ``D``: the kernel died recently (an OOPS or a BUG).

Every GPU node carries ``P`` (proprietary module: the NVIDIA driver) and often ``O``/``E``
(out-of-tree, unsigned modules): those are not faults and have no rule.
"""

from __future__ import annotations

from minutiae.model.snapshot import Snapshot, SnapshotBuilder

SOURCE = "taint"
COMPONENT = "kernel:taint"
#: (bit, metric): the flags kept by name
FLAGS = ((4, "taint_machine_check"), (7, "taint_died"))


def parse_taint(data: bytes | str, where: str = "tainted") -> Snapshot:
    """The taint mask and its named flags; a problem (not a value) when it is not a number."""
    b = SnapshotBuilder(SOURCE)
    text = (data.decode("ascii", "replace") if isinstance(data, bytes) else data).strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        b.problem(COMPONENT, where, f"not a taint mask: {text[:40]!r}")
        return b.build()
    mask = int(text)
    b.add(COMPONENT, "tainted", mask)
    for bit, metric in FLAGS:
        b.add(COMPONENT, metric, bool(mask >> bit & 1))
    return b.build()

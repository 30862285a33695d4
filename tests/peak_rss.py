"""Peak memory of this process from a chosen moment on, read the way the kernel keeps it per
address space.

``ru_maxrss`` cannot do this: Linux carries a parent's peak into a child through fork and exec, and
it never goes down, so late in the suite (pytest at several hundred MB) every child "grew" by 0.
``VmHWM`` in /proc/self/status belongs to the process's own memory map, and writing ``5`` to
/proc/self/clear_refs resets it to the current RSS (proc(5)).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CHILD_SNIPPET", "peak_kib", "reset_peak"]


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


#: the same two functions for a ``python -c`` child, which cannot import from tests/
CHILD_SNIPPET = """
def reset_peak():
    open('/proc/self/clear_refs', 'w').write('5')
def peak_kib():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1])
"""

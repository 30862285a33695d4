"""``/proc/uptime`` (pure): ``"350735.47 234388.90\\n"`` → seconds since boot.

The first field is the time since boot in seconds (the second, idle time summed over CPUs, is
ignored; see proc(5)). Anything else — empty, garbage, a negative, infinite or NaN number — is
``None``: an unknown uptime, which the counter rules treat as no boot grace (never as healthy).
"""

from __future__ import annotations

import math


def parse_uptime(data: bytes | str) -> float | None:
    """Seconds since boot from the text of ``/proc/uptime``; ``None`` when it is not one."""
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
    fields = text.split(maxsplit=1)
    if not fields:
        return None
    try:
        value = float(fields[0])
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None

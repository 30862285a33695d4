"""tqdm progress bars as they land in a log file (``\\r``-separated redraws split into lines)."""

from __future__ import annotations

import re

#: ``450/1000 [01:23<01:42,  5.38it/s`` or ``34/690 [01:10<22:35,  2.07s/it``
BAR = re.compile(r"(\d+)/(\d+) \[[0-9:]+<[0-9:?]+,\s*([0-9.]+)(s/it|it/s)")


def rate_seconds(value: str, unit: str) -> float | None:
    v = float(value)
    if unit == "s/it":
        return v
    return 1.0 / v if v > 0 else None

"""Megatron-LM's StragglerDetector (``--log-straggler``): the slowest rank of each interval.

``megatron/core/utils.py`` ``StragglerDetector.report`` logs on rank 0, every log interval::

    [2024-03-14 23:07:56] | MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0 | MnPwr/Rnk: ...
    ^^^^ Bottom 4 Ranks with lowest  Etpt(TF): 296.02/0, 296.17/2, 296.23/1, 296.23/4,

``MxRtt/Rnk`` names the rank with the longest round-trip time of the interval; the Bottom line
(``--straggler-minmax-count`` > 1) the ranks with the lowest estimated throughput.
"""

from __future__ import annotations

import re

from minutiae.analyses.stragglers.formats.base import NUM, LineReader

_MN = re.compile(r"MnRtt/Rnk:\s*" + NUM + r"ms/(\d+)")
_MX = re.compile(r"MxRtt/Rnk:\s*" + NUM + r"ms/(\d+)")
_BOTTOM = re.compile(r"Bottom\s+\d+\s+Ranks with lowest\s+Etpt\(TF\):\s*" + NUM + r"/(\d+)")


class Reader(LineReader):
    name = "megatron-straggler"
    advice = ("StragglerDetector reports the slowest rank per interval, not every rank's time "
              "(add --timing-log-option all for per-rank timers)")
    signs = ("MxRtt/Rnk", "Ranks with lowest")

    def feed(self, no: int, rank: int | None, line: str) -> bool:
        if "MxRtt/Rnk" in line:
            mx, mn = _MX.search(line), _MN.search(line)
            if mx is None:
                return self.fail(no, "StragglerDetector line without a readable MxRtt/Rnk")
            hi = float(mx[1])
            lo = float(mn[1]) if mn else None
            spread = hi / lo - 1.0 if lo else None
            self.evidence(int(mx[2]), None, hi, spread, line, no)
            return True
        b = _BOTTOM.search(line)
        if b is None:
            return False
        self.seen += 1  # read; the MxRtt line of the same interval is the evidence
        return True

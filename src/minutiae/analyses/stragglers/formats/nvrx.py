"""nvidia-resiliency-ext straggler reports (``StragglerDetectionCallback``, Megatron-Bridge's
``NVRxStragglerDetection``, NeMo), ``_format_gpu_scores``/``_print_gpu_scores``::

    GPU relative performance:
     Worst performing 5/512 ranks:
      Rank=76 Node=h100-001-253-012 Score=0.94
      ...
     Best performing 5/512 ranks:
      Rank=432 Node=h100-004-141-026 Score=0.99

Scores are relative to the best rank (1.0); the first "worst" line of a report is the slowest
rank of that interval. ``GPU individual performance`` blocks (each GPU against its own
reference) are read the same way.
"""

from __future__ import annotations

import re

from minutiae.analyses.stragglers.formats.base import NUM, LineReader

_ENTRY = re.compile(r"^\s*Rank=(\d+)\s+Node=(\S*)\s+Score=" + NUM)
_HEAD = re.compile(r"GPU (relative|individual) performance:")
_PART = re.compile(r"^\s*(Worst|Best) performing \d+/\d+ ranks:")


class Reader(LineReader):
    name = "nvrx"
    advice = "nvidia-resiliency-ext reports relative scores, not step times"
    signs = ("performance:", "performing", "Rank=")

    def __init__(self) -> None:
        super().__init__()
        self._block = ""
        self._part = ""
        self._first = False
        self.nodes: dict[int, str] = {}

    def feed(self, no: int, rank: int | None, line: str) -> bool:
        h = _HEAD.search(line)
        if h:
            self._block, self._part = h[1], ""
            return True
        if not self._block:
            return False
        p = _PART.match(line)
        if p:
            self._part, self._first = p[1], p[1] == "Worst"
            return True
        e = _ENTRY.match(line)
        if e is None:
            self._block = ""
            return False
        r, score = int(e[1]), float(e[3])
        self.nodes[r] = e[2]
        if self._part == "Worst" and self._first and self._block == "relative":
            self._first = False
            self.evidence(r, None, score, (1.0 / score - 1.0) if score > 0 else None, line, no)
        else:
            self.seen += 1
        return True

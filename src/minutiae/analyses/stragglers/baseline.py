"""The nvidia-resiliency-ext straggler rule, as a baseline for benchmarks.

nvidia-resiliency-ext (``nvidia_resiliency_ext.straggler``) reports once per report interval:
for every rank and section it takes the median time over the interval, then

- relative score = best rank's median / this rank's median (the fastest rank is the reference),
- individual score = this rank's best median so far / its current median,

and calls a rank a straggler when a score falls below a threshold (0.7-0.75 in its examples and
in NeMo/Megatron-Bridge configs). Scores use all ranks as one pool (no peer groups). Here the
report interval is ``window`` steps and both scores use ``threshold``.
"""

from __future__ import annotations

import numpy as np


class NvrxBaseline:
    """Streaming form: feed (steps, ranks) blocks; ``first_flag[r]`` is the step at the end of the
    first report window in which rank r scored below the threshold (-1: never)."""

    def __init__(self, ranks: int, window: int = 60, threshold: float = 0.75) -> None:
        self.window, self.threshold = window, threshold
        self._buf = np.empty((window, ranks), dtype=np.float32)
        self._fill = 0
        self.best = np.full(ranks, np.inf)
        self.first_flag = np.full(ranks, -1, dtype=np.int64)

    def update(self, x: np.ndarray, steps: np.ndarray) -> None:
        i = 0
        while i < x.shape[0]:
            take = min(self.window - self._fill, x.shape[0] - i)
            self._buf[self._fill:self._fill + take] = x[i:i + take]
            self._fill += take
            i += take
            if self._fill == self.window:
                self._report(int(steps[i - 1]))
                self._fill = 0

    def _report(self, step: int) -> None:
        med = np.nanmedian(self._buf, axis=0)
        relative = np.nanmin(med) / med
        self.best = np.fmin(self.best, med)
        individual = self.best / med
        flagged = (relative < self.threshold) | (individual < self.threshold)
        new = flagged & (self.first_flag < 0)
        self.first_flag[new] = step

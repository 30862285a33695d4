"""PyTorch Lightning's own console output: the training progress bar and the profiler report.

- ``TQDMProgressBar`` (``lightning/pytorch/callbacks/progress/tqdm_progress.py``), one redraw
  per batch: ``Epoch 3:  45%|████▌     | 450/1000 [01:23<01:42,  5.38it/s, v_num=3,
  train_loss=0.123]``. The rate is tqdm's smoothed rate; the global step is ``epoch * total +
  n``. ``Validation``/``Sanity Checking``/``Testing``/``Predicting`` bars are not training steps.
- ``SimpleProfiler`` report (``FIT Profiler Report``): ``| run_training_batch | 0.22579 | 790 |
  178.37 | 26.869 |`` gives the mean batch time and the number of batches (``totals``).
"""

from __future__ import annotations

import re

from minutiae.analyses.stragglers.formats.base import NUM, LineReader
from minutiae.analyses.stragglers.formats.tqdm import BAR, rate_seconds

_EPOCH = re.compile(r"^\s*Epoch (\d+):")
_OTHER = ("Validation", "Sanity Checking", "Testing", "Predicting")
_PROFILE = re.compile(r"^\|\s*run_training_batch\s*\|\s*" + NUM + r"\s*\|\s*(\d+)\s*\|")


class Reader(LineReader):
    name = "lightning"
    advice = ("Lightning's progress bar is rank 0's: use the StepTimer callback "
              "(docs/stragglers.md) for per-rank times")
    signs = ("Epoch ", "run_training_batch", *_OTHER)

    def feed(self, no: int, rank: int | None, line: str) -> bool:
        p = _PROFILE.match(line.strip())
        if p:
            self.totals["mean_step_seconds"] = float(p[1])
            self.totals["steps"] = float(p[2])
            self.seen += 1
            return True
        if any(line.lstrip().startswith(o) for o in _OTHER) and BAR.search(line):
            self.seen += 1
            return True
        e = _EPOCH.match(line)
        if e is None:
            return False
        b = BAR.search(line)
        if b is None:
            return bool(line.strip() == e[0].strip())
        n, total = int(b[1]), int(b[2])
        self.step(int(e[1]) * total + n, rank, no, seconds=rate_seconds(b[3], b[4]))
        return True

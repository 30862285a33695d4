"""Hugging Face ``Trainer`` console output (``transformers/trainer.py``: ``self.log`` prints the
logs dict; the progress bar is tqdm)::

    {'loss': 1.6427, 'grad_norm': 3.3125, 'learning_rate': 1.03e-06, 'epoch': 0.0}
    {'train_runtime': 1891.9246, 'train_samples_per_second': 5.816, 'train_steps_per_second': 0.365, 'train_loss': 0.31, 'epoch': 3.0}
     34%|███▍      | 234/690 [07:31<14:39,  1.93s/it]

Recent releases print values as strings (``{'loss': '0.02608', ...}``). The per-log dicts carry
no step time (``epoch`` only); step times come from the training bar (the bar with the largest
total: evaluation bars are shorter) and the whole-run figures from the final dict (``totals``).
"""

from __future__ import annotations

import re

from minutiae.analyses.stragglers.formats.base import LineReader
from minutiae.analyses.stragglers.formats.tqdm import BAR, rate_seconds

_PAIR = re.compile(r"'([A-Za-z_/]+)':\s*'?([-+0-9.eE]+|nan|inf)'?")
_TOTALS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss",
           "total_flos")


class Reader(LineReader):
    name = "hf-trainer"
    advice = ("the Trainer logs on the main process only: use StepTimer for per-rank times")
    signs = ("{'", "%|")

    def __init__(self) -> None:
        super().__init__()
        self.logs = 0
        self._bars: dict[int, list[tuple[int, int | None, float | None, int]]] = {}

    def feed(self, no: int, rank: int | None, line: str) -> bool:
        s = line.strip()
        if s.startswith("{'") and s.endswith("}"):
            pairs = dict(_PAIR.findall(s))
            if "train_runtime" in pairs:
                for k in _TOTALS:
                    if k in pairs:
                        self.totals[k] = float(pairs[k])
                self.seen += 1
                return True
            if "epoch" in pairs and ("loss" in pairs or "eval_loss" in pairs):
                self.logs += 1
                self.seen += 1
                return True
            return False
        if "%|" not in s or s.startswith(("Epoch ", "Validation", "Sanity", "Testing")):
            return False
        b = BAR.search(s)
        if b is None:
            return False
        self._bars.setdefault(int(b[2]), []).append((int(b[1]), rank, rate_seconds(b[3], b[4]),
                                                     no))
        return True

    def finish(self) -> None:
        """The training bar's rows (the bar with the largest total)."""
        if not self._bars:
            return
        for step, rank, secs, no in self._bars[max(self._bars)]:
            self.step(step, rank, no, seconds=secs)

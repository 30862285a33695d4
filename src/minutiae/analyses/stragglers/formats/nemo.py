"""NeMo 1 and NeMo 2 training step lines.

- NeMo 2 (``nemo/lightning/pytorch/callbacks/progress_printer.py``)::

    Training epoch 0, iteration 1/249 | lr: 3.922e-06 | global_batch_size: 8 | global_step: 1 |
    reduced_train_loss: 1.653 | train_step_timing in s: 2.505 | consumed_samples: 16

- NeMo 1 (the Lightning progress bar with NeMo's metrics; ``\\r``-separated in a file)::

    Epoch 0: : 100%|██████████| 100/100 [10:48<00:00, reduced_train_loss=0.0172,
    global_step=99.00, consumed_samples=25600.0, train_step_timing in s=3.130]

``tflops_per_sec_per_gpu`` (NeMo's FLOPs callback) is read when printed.
"""

from __future__ import annotations

import re

from minutiae.analyses.stragglers.formats.base import NUM, LineReader

_TIMING = re.compile(r"train_step_timing in s\s*[:=]\s*" + NUM)
_STEP = re.compile(r"global_step\s*[:=]\s*" + NUM)
_ITER = re.compile(r"iteration\s+(\d+)/\d+")
_TFLOPS = re.compile(r"tflops_per_sec_per_gpu\s*[:=]\s*" + NUM)


class Reader(LineReader):
    name = "nemo"
    advice = ("NeMo prints train_step_timing from rank 0: give one log per rank (torchrun --tee "
              "3, srun -l) or use StepTimer")
    signs = ("train_step_timing in s",)

    def feed(self, no: int, rank: int | None, line: str) -> bool:
        if "train_step_timing in s" not in line:
            return False
        t = _TIMING.search(line)
        s = _STEP.search(line) or _ITER.search(line)
        if t is None or s is None:
            return self.fail(no, "NeMo line without a readable global_step and "
                                 "train_step_timing in s")
        tf = _TFLOPS.search(line)
        self.step(int(float(s[1])), rank, no, seconds=float(t[1]),
                  tflops=float(tf[1]) if tf else None)
        return True

"""torchtitan's metrics line (``torchtitan/components/metrics.py`` ``MetricsProcessor.log``)::

    [rank0]:[titan] 2025-06-04 08:51:58,557 - root - INFO - step: 10  loss: 10.7069
    memory: 30.99GiB(32.62%)  tps: 7,034  tflops: 407.35  mfu: 41.19%

(one line; ANSI colours removed before). ``tps`` is tokens per second per device; a step time
is printed only by forks (``elapsed_time_per_step: 1.234s``). ``validate step:`` lines are not
training steps and are skipped.
"""

from __future__ import annotations

import re

from minutiae.analyses.stragglers.formats.base import NUM, LineReader, number

_STEP = re.compile(r"(?<![a-z] )\bstep:\s*(\d+)\s+loss:")
_TPS = re.compile(r"\btps:\s*([0-9][0-9,]*(?:\.\d+)?)")
_TFLOPS = re.compile(r"\btflops:\s*([0-9][0-9,]*(?:\.\d+)?)")
_MFU = re.compile(r"\bmfu:\s*" + NUM + "%")
_ELAPSED = re.compile(r"elapsed_time_per_step:\s*" + NUM + "s")


class Reader(LineReader):
    name = "torchtitan"
    advice = ("torchtitan logs rank 0 only (set --metrics.log_all_ranks or LOG_RANK=all in "
              "run_train.sh) to compare ranks")
    signs = ("tps:",)

    def feed(self, no: int, rank: int | None, line: str) -> bool:
        if "tps:" not in line or "loss:" not in line:
            return False
        if "validate step:" in line:
            self.seen += 1
            return True
        s, tps = _STEP.search(line), _TPS.search(line)
        if s is None or tps is None:
            return self.fail(no, "torchtitan line without a readable step and tps")
        tf, mfu, el = _TFLOPS.search(line), _MFU.search(line), _ELAPSED.search(line)
        self.step(int(s[1]), rank, no, seconds=float(el[1]) if el else None,
                  tokens=number(tps[1]), tflops=number(tf[1]) if tf else None,
                  mfu=float(mfu[1]) / 100.0 if mfu else None)
        return True

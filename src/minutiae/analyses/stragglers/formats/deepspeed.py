"""DeepSpeed engine logs: wall-clock breakdown, throughput timer and flops-profiler summary.

From ``deepspeed/runtime/engine.py`` / ``deepspeed/utils/timer.py`` (``log_dist`` adds the
``[Rank N]``; older releases print without it)::

    [Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]
    [Rank 0] time (ms) | fwd_microstep: 6567.68 | bwd_microstep: 17950.36 | ... | step_microstep: 1139.27
    [Rank 0] time (ms) | fwd: 6567.66 | bwd: 17950.35 | bwd_inner: 17711.19 | bwd_allreduce: 239.11 | step: 1139.29
    epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=25.02, CurrSamplesPerSec=25.70, ...

and ``deepspeed/profiling/flops_profiler/profiler.py`` ``print_model_profile``::

    Profile Summary at step 10:
    iter latency:                                                 184.73 ms
    fwd+bwd FLOPS per GPU = 3 * fwd flops per GPU / (fwd+bwd latency):   102.0 TFLOPS
    samples/second:                                               433.07

The per-step (global) timer line gives per-rank sections ``forward``, ``backward``
(``bwd_inner``), ``allreduce`` (``bwd_allreduce``) and ``optimizer`` (``step``); its step is
the last ``step=N`` seen, else one more than the rank's previous line. ``*_microstep`` lines
(one per micro-batch) are summed by DeepSpeed into the global line, so they are read but not
counted again.
"""

from __future__ import annotations

import re

from minutiae.analyses.stragglers.formats.base import NUM, LineReader, seconds

_TIMES = re.compile(r"(?:\[Rank (\d+)\] )?time \(ms\) \|(.*)$")
_PAIR = re.compile(r"([A-Za-z_]+):\s*" + NUM)
_STEPLINE = re.compile(r"\[Rank (\d+)\] step=(\d+), skipped=")
_SPEED = re.compile(r"(?:global_step=|/|^|\s)(\d+), RunningAvgSamplesPerSec=" + NUM +
                    r", CurrSamplesPerSec=" + NUM)
_PROFILE = re.compile(r"Profile Summary at step (\d+):")
_LAT = re.compile(r"^iter latency:\s*" + NUM + r"\s*(ms|s|us)\b")
_FLOPS = re.compile(r"^fwd\+bwd FLOPS per GPU = .*?:\s*" + NUM + r"\s*([GTP])FLOPS")
_SPS = re.compile(r"^samples/second:\s*" + NUM)
_SECTIONS = {"fwd": "forward", "forward": "forward", "bwd_inner": "backward",
             "backward_inner": "backward", "bwd_allreduce": "allreduce",
             "backward_allreduce": "allreduce", "step": "optimizer"}
_SCALE = {"G": 1e-3, "T": 1.0, "P": 1e3}


class Reader(LineReader):
    name = "deepspeed"
    advice = ("DeepSpeed prints its wall-clock breakdown on rank 0 only: give one log per rank "
              "(torchrun --tee 3 / --log-dir, srun -l) to compare ranks")
    signs = ("time (ms) |", "RunningAvgSamplesPerSec", "] step=", "Profile Summary",
             "iter latency:", "FLOPS per GPU", "samples/second:")

    def __init__(self) -> None:
        super().__init__()
        self._last_step: int | None = None
        self._used: dict[int, int] = {}
        self._profile: int | None = None

    def feed(self, no: int, rank: int | None, line: str) -> bool:
        if "time (ms) |" in line:
            return self._times(no, rank, line)
        m = _STEPLINE.search(line)
        if m:
            self._last_step = int(m[2])
            self.seen += 1
            return True
        m = _SPEED.search(line)
        if m:
            self.step(int(m[1]), rank, no, samples=float(m[3]))
            return True
        return self._profiler(no, rank, line)

    def _times(self, no: int, rank: int | None, line: str) -> bool:
        m = _TIMES.search(line)
        if m is None:
            return False
        pairs = [(k, float(v)) for k, v in _PAIR.findall(m[2])]
        if not pairs:
            return self.fail(no, "DeepSpeed timer line without name: value pairs")
        if all(k.endswith("_microstep") for k, _ in pairs) or not any(
                k in ("fwd", "forward") for k, _ in pairs):  # micro-steps; optimizer_* timers
            self.seen += 1
            return True
        r = int(m[1]) if m[1] is not None else rank
        key = -1 if r is None else r
        prev = self._used.get(key)
        step = self._last_step if self._last_step is not None and (
            prev is None or self._last_step > prev) else (prev + 1 if prev is not None else 1)
        self._used[key] = step
        total = 0.0
        for k, ms in pairs:
            section = _SECTIONS.get(k)
            if section is None:
                continue
            total += ms / 1000.0
            if r is not None:
                self.rows.ranks.append((step, r, ms / 1000.0, section))
        self.step(step, r, no, seconds=total or None)
        return True

    def _profiler(self, no: int, rank: int | None, line: str) -> bool:
        m = _PROFILE.search(line)
        if m:
            self._profile = int(m[1])
            self.seen += 1
            return True
        if self._profile is None:
            return False
        s = line.strip()
        lat, fl, sps = _LAT.match(s), _FLOPS.match(s), _SPS.match(s)
        if lat:
            self.step(self._profile, rank, no, seconds=seconds(lat[1], lat[2]))
        elif fl:
            self.step(self._profile, rank, no, tflops=float(fl[1]) * _SCALE[fl[2]])
        elif sps:
            self.step(self._profile, rank, no, samples=float(sps[1]))
            self._profile = None
        else:
            return False
        return True

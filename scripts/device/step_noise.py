"""Real step-time noise of one GPU: fixed "training steps" timed back to back, with the GPU's
clock, power, temperature and clock-event reasons read through NVML every few steps, so the
straggler detector's noise model (AR wander, spikes) can be checked against a real board.

Usage: python3 step_noise.py OUT.csv [SECONDS_PER_WORKLOAD]

Workloads, one after the other: ``gemm`` (10 bf16 8192^3 matrix products a step: compute-bound,
runs into the board's power cap), ``copy`` (8 copies of a 2 GiB buffer a step: HBM-bound),
``mixed`` (5 products and 4 copies). Each step's time is measured with CUDA events; columns:
workload, step, wall_s (since start), seconds, sm_mhz, mem_mhz, power_w, temp_c, reasons
(NVML reads every 10th step, empty otherwise).
"""

from __future__ import annotations

import csv
import sys
import time

import pynvml
import torch


def main(out: str, seconds: float) -> int:
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    src = torch.empty(1 << 30, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    work = {
        "gemm": lambda: [a @ b for _ in range(10)],
        "copy": lambda: [dst.copy_(src) for _ in range(8)],
        "mixed": lambda: ([a @ b for _ in range(5)], [dst.copy_(src) for _ in range(4)]),
    }
    t0 = time.time()
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "step", "wall_s", "seconds", "sm_mhz", "mem_mhz", "power_w", "temp_c", "reasons"])
        for name, fn in work.items():
            for _ in range(20):  # warm-up, not recorded
                fn()
            torch.cuda.synchronize()
            end_at, step = time.time() + seconds, 0
            while time.time() < end_at:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                e1.synchronize()
                row = [name, step, f"{time.time() - t0:.4f}", f"{e0.elapsed_time(e1) / 1000:.6f}"]
                if step % 10 == 0:
                    row += [pynvml.nvmlDeviceGetClockInfo(h, 1), pynvml.nvmlDeviceGetClockInfo(h, 2),
                            pynvml.nvmlDeviceGetPowerUsage(h) / 1000, pynvml.nvmlDeviceGetTemperature(h, 0),
                            hex(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))]
                w.writerow(row)
                step += 1
            print(name, step, "steps", flush=True)
    pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 40.0))

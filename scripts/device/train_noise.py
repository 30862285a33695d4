"""Real step-time noise of a training loop on one GPU: a 12-layer transformer (d 2048, 16 heads,
sequence 1024, batch 8, bf16 autocast, AdamW) trained on random tokens, each step timed with
CUDA events (GPU time) and the wall clock (what a logger prints), NVML's clocks and power every
tenth step. Usage: python3 train_noise.py OUT.csv [SECONDS]

Columns: step, wall_s (since start), seconds (CUDA events), wall_step_s, sm_mhz, power_w,
temp_c, reasons (NVML reads every 10th step, empty otherwise).
"""

from __future__ import annotations

import csv
import sys
import time

import pynvml
import torch
from torch import nn


def model() -> tuple[nn.Module, nn.Module, nn.Module]:
    emb = nn.Embedding(32000, 2048).cuda()
    layer = nn.TransformerEncoderLayer(2048, 16, 8192, batch_first=True, norm_first=True)
    body = nn.TransformerEncoder(layer, 12).cuda()
    head = nn.Linear(2048, 32000).cuda()
    return emb, body, head


def main(out: str, seconds: float) -> int:
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    emb, body, head = model()
    params = [*emb.parameters(), *body.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        x = torch.randint(0, 32000, (8, 1024), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = head(body(emb(x)))
            loss = loss_fn(logits.view(-1, 32000).float(), x.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    t0 = time.time()
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "wall_s", "seconds", "wall_step_s", "sm_mhz", "power_w", "temp_c", "reasons"])
        n, last = 0, time.perf_counter()
        while time.time() < t0 + seconds:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            step()
            e1.record()
            e1.synchronize()
            now = time.perf_counter()
            row = [n, f"{time.time() - t0:.4f}", f"{e0.elapsed_time(e1) / 1000:.6f}", f"{now - last:.6f}"]
            last = now
            if n % 10 == 0:
                row += [pynvml.nvmlDeviceGetClockInfo(h, 1), pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
                        pynvml.nvmlDeviceGetTemperature(h, 0), hex(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))]
            w.writerow(row)
            n += 1
    print("steps", n, flush=True)
    pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 240.0))

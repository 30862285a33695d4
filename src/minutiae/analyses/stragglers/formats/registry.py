"""The training-log formats, one line each, tried in this order on every line that Megatron's
vectorised reader (``formats.megatron``, always first) did not take. Add a format: one module
with a ``Reader(LineReader)``, one line here, one test in tests/analyses/stragglers/test_formats*.py
with real lines and their origin in tests/data/trainlogs/SOURCES.md."""

from __future__ import annotations

from minutiae.analyses.stragglers.formats import (
    deepspeed,
    environment,
    hf_trainer,
    lightning,
    megatron_straggler,
    nemo,
    nvrx,
    torchtitan,
)
from minutiae.analyses.stragglers.formats.base import LineReader

READERS: tuple[type[LineReader], ...] = (
    megatron_straggler.Reader,   # Megatron-LM StragglerDetector (MnRtt/Rnk ... MxRtt/Rnk)
    nvrx.Reader,                 # nvidia-resiliency-ext GPU performance reports
    deepspeed.Reader,            # DeepSpeed wall-clock breakdown, throughput, flops profiler
    nemo.Reader,                 # NeMo 1 and 2 (train_step_timing in s)
    torchtitan.Reader,           # torchtitan (step: loss: tps: tflops: mfu:)
    lightning.Reader,            # PyTorch Lightning progress bar and SimpleProfiler
    hf_trainer.Reader,           # Hugging Face Trainer log dicts and progress bar
    environment.Reader,          # NCCL INFO/WARN, DeepSpeed versions: attrs and hosts, no steps
)

#: every name a log can be recognised as (the vectorised Megatron reader first)
NAMES: tuple[str, ...] = ("megatron", *(r.name for r in READERS))

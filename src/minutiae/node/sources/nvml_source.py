"""The NVML source: this node's GPUs through ``pynvml`` (node/sources/nvml.py), when no GPU
capture is given (a fallback of the gpu group)."""

from __future__ import annotations

from minutiae.errors import MinutiaeError
from minutiae.node.result import unknown
from minutiae.node.sources import gpu
from minutiae.node.sources.base import Kind, Option, Reading, Request, Source


def _read(req: Request) -> Reading | None:
    if not req.cfg.use_nvml:
        return Reading(result=unknown(gpu.GROUP, "no GPU source (NVML disabled, no capture given)"))
    from minutiae.node.sources.nvml import load_pynvml, read_nvml

    try:
        api = req.cfg.nvml if req.cfg.nvml is not None else load_pynvml()
        return Reading(read_nvml(api, req.now))
    except MinutiaeError as exc:
        return gpu.unreadable(exc)


NVML = Source("nvml", gpu.GROUP, _read, components=gpu.COMPONENTS, fallback=True, options=(
    Option("--no-nvml", "use_nvml", Kind.FLAG, invert=True,
           check={"help": "Never load NVML (GPU check UNKNOWN without a capture)."},
           agent={"help": "never load NVML"}),))

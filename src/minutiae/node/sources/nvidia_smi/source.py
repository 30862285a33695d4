"""The nvidia-smi sources: a ``nvidia-smi -q -x`` (or ``-q``) capture for the gpu check, and an
``nvidia-smi nvlink --status`` capture whose link states are matched to its GPUs by UUID."""

from __future__ import annotations

from minutiae.errors import MinutiaeError
from minutiae.node.result import unknown
from minutiae.node.sources import gpu
from minutiae.node.sources.base import Kind, Option, Reading, Request, Source


def _read_capture(req: Request) -> Reading | None:
    if req.cfg.nvidia_smi_xml is None:
        return None
    from minutiae.node.sources.nvidia_smi.read import read_nvidia_smi_file

    try:
        return Reading(read_nvidia_smi_file(req.cfg.nvidia_smi_xml))
    except MinutiaeError as exc:
        return gpu.unreadable(exc)


def _read_nvlink(req: Request) -> Reading | None:
    if req.cfg.nvlink_status is None or req.base is None:
        return None
    from minutiae.node.sources.nvidia_smi.parse.nvlink import by_uuid
    from minutiae.node.sources.nvidia_smi.read import read_nvlink_status_file

    try:
        return Reading(by_uuid(read_nvlink_status_file(req.cfg.nvlink_status), req.base))
    except MinutiaeError as exc:
        return Reading(result=unknown(gpu.GROUP, str(exc)))


NVIDIA_SMI = Source("nvidia_smi", gpu.GROUP, _read_capture, components=gpu.COMPONENTS, options=(
    Option("--nvidia-smi-xml", "nvidia_smi_xml", Kind.PATH, capture=True,
           check={"help": "nvidia-smi -q -x (or -q) capture instead of NVML."},
           agent={"help": "nvidia-smi -q -x capture instead of NVML"}),))

NVLINK = Source("nvlink_status", gpu.GROUP, _read_nvlink, components=("gpu",), options=(
    Option("--nvlink-status", "nvlink_status", Kind.PATH, capture=True, agent=None, check={
        "help": "nvidia-smi nvlink --status capture (NVLink link states, matched by GPU UUID)."}),))

"""Replays NVML as one real node answered it: a recording made by
``scripts/device/nvml_record.py`` (``tests/data/h200/nvml/calls.json``) holds every call with its
arguments (the device handle replaced by the GPU index) and the driver's result or NVMLError code.

``ReplayNvml(calls)`` answers each ``pynvml`` call minutiae makes from that recording, so
``read_nvml`` runs on a real driver's answers without the driver. A call the recording does not
hold raises ``MissingCall`` (a test failure naming the call: record the node again), never a
made-up value.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

__all__ = ["MissingCall", "ReplayNvml"]


class MissingCall(LookupError):
    """The recording holds no answer for this call and these arguments."""


def _key(name: str, args: tuple[Any, ...]) -> str:
    return json.dumps([name, list(args)])


class ReplayNvml:
    NVMLError = pynvml.NVMLError

    def __init__(self, calls: list[dict[str, Any]]) -> None:
        self.answers: dict[str, dict[str, Any]] = {}
        for entry in calls:
            self.answers.setdefault(_key(str(entry["call"]), tuple(entry["args"])), entry)
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    @classmethod
    def from_file(cls, path: Path) -> ReplayNvml:
        calls = json.loads(path.read_text())
        if not isinstance(calls, list):
            raise ValueError(f"{path}: not a list of recorded calls")
        return cls(calls)

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            self.calls.append((name, args))
            entry = self.answers.get(_key(name, args))
            if entry is None:
                raise MissingCall(f"{name}{args} is not in the recording")
            if entry.get("error") is not None:
                raise pynvml.NVMLError(int(entry["error"]))
            return self._result(name, args, entry.get("result"))

        return call

    @staticmethod
    def _result(name: str, args: tuple[Any, ...], result: Any) -> Any:
        if name == "nvmlDeviceGetHandleByIndex":
            return args[0]  # the handle is the index, as the recording wrote it
        if isinstance(result, dict):
            return SimpleNamespace(**result)
        if isinstance(result, list):
            return tuple(result)
        return result

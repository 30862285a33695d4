"""``RunRecord``: one job run as the regression analyses see it.

A run is identified by ``run_id``; its *signature* names what must be comparable across runs
(model/config hash, world size, parallelism layout: the caller decides, we only compare runs with
equal signatures). Throughput is one of three metrics; analyses work on ``log_cost``, the natural
log of time per unit of work, so that +0.03 in ``exp(Δ) - 1`` always means 3 % slower whatever the
metric.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

#: software-stack attributes we know by name (any other column is kept as an attribute too);
#: the last four are what training logs print (docs/trainlogs.md, "The run's environment")
STACK_KEYS: tuple[str, ...] = ("driver", "cuda", "nccl", "kernel", "firmware", "image",
                               "cuda_driver", "torch", "deepspeed", "aws_ofi_nccl")

#: columns with a fixed meaning; every other CSV column is an attribute
CORE_COLUMNS = frozenset(
    {"run_id", "time", "signature", "seconds_per_step", "tokens_per_s", "samples_per_s", "nodes",
     "gpus", "world_size", "duration_s", "gpu_hours", "start", "end"}
)


class Metric(Enum):
    """How throughput was measured. ``SECONDS_PER_STEP`` grows when slower; the rates shrink."""

    SECONDS_PER_STEP = "seconds_per_step"
    TOKENS_PER_S = "tokens_per_s"
    SAMPLES_PER_S = "samples_per_s"

    @property
    def higher_is_slower(self) -> bool:
        return self is Metric.SECONDS_PER_STEP


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One job run.

    ``attrs`` maps an attribute (``driver``, ``nccl``, ``kernel``, ``firmware``, ``cuda``,
    ``image`` or any config key) to the *set* of values seen on the run's nodes (a run spread over
    nodes with two driver versions has both). An empty set means the value is missing (unknown),
    which is never read as "unchanged". ``gpus`` and ``duration_s`` give the GPU-hours the run used
    (both optional: impact and fleet costs need them).
    """

    run_id: str
    time: float
    signature: str
    value: float
    metric: Metric = Metric.SECONDS_PER_STEP
    nodes: tuple[str, ...] = ()
    attrs: Mapping[str, frozenset[str]] = field(default_factory=dict)
    gpus: int | None = None
    duration_s: float | None = None

    @property
    def log_cost(self) -> float:
        """ln(time per unit of work): differences are log-ratios of step time."""
        lv = math.log(self.value)
        return lv if self.metric.higher_is_slower else -lv

    @property
    def seconds_per_step(self) -> float | None:
        return self.value if self.metric is Metric.SECONDS_PER_STEP else None

    @property
    def size(self) -> str:
        """The run's scale as a label (GPUs, else nodes), '' when unknown: runs of one signature
        at different scales are not comparable step for step."""
        if self.gpus is not None:
            return f"{self.gpus} GPUs"
        if self.nodes:
            return f"{len(self.nodes)} nodes"
        count = self.attrs.get("node_count")
        return f"{min(count)} nodes" if count else ""

    def gpu_hours(self) -> float | None:
        """GPU-hours this run used, or None when its size or duration is unknown."""
        if self.gpus is None or self.duration_s is None:
            return None
        return self.gpus * self.duration_s / 3600.0

    def attr_text(self, key: str) -> str:
        """The attribute as one string (values joined by a space), '' when missing."""
        return " ".join(sorted(self.attrs.get(key, frozenset())))

    def to_json(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "time": self.time,
            "signature": self.signature,
            self.metric.value: self.value,
            "nodes": list(self.nodes),
            "attrs": {k: sorted(v) for k, v in sorted(self.attrs.items())},
            "gpus": self.gpus,
            "duration_s": self.duration_s,
        }

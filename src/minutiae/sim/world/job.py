"""A simulated training job: where and when it runs (its own module so that the plan and the
per-job structure of its timings, ``shape.py``, can both use it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Job:
    job_id: str
    start: float
    end: float
    nodes: tuple[str, ...]
    signature: str
    step_s: float              # seconds per step before slowdowns (rollout effect included)
    outcome: str               # completed | failed | preempted

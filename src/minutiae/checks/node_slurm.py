"""What ``minutiae check --slurm`` does with a ``NodeReport`` (HealthCheckProgram semantics).

- the node needs ``reset_gpu`` or more → drain it with ``minutiae: <reason>`` (a node already
  drained or down by an admin or another tool keeps its state and reason);
- the node is healthy (OK or WARNING, nothing that drains) and *we* drained it → resume it;
- anything else (UNKNOWN: could not tell; a drain that is not ours) → leave the node alone.
Pure apart from the injected ``SchedulerBackend``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from minutiae.actions.base import SchedulerBackend, make_reason
from minutiae.checks.node import NodeReport
from minutiae.model import Status


class SlurmOutcome(Enum):
    DRAINED = "drained"
    ALREADY_DRAINED = "already_drained"
    LEFT_ALONE = "left_alone"  # drained/down by someone else
    RESUMED = "resumed"
    NOTHING = "nothing"


@dataclass(frozen=True, slots=True)
class SlurmStep:
    outcome: SlurmOutcome
    node: str
    reason: str | None = None
    detail: str = ""

    def to_json(self) -> dict[str, str | None]:
        return {"outcome": self.outcome.value, "node": self.node, "reason": self.reason,
                "detail": self.detail}


def slurm_step(report: NodeReport, backend: SchedulerBackend, node: str | None = None) -> SlurmStep:
    """Apply the report to the scheduler. Raises ``BackendUnavailable``/``BackendError``."""
    name = node or report.node
    current = backend.state(name)
    if report.drain:
        reason = make_reason(report.reason() or report.action.label)
        if current.reason == reason and current.ours:
            return SlurmStep(SlurmOutcome.ALREADY_DRAINED, name, reason, "already drained by minutiae")
        if current.reason is not None and not current.ours and current.state.value != "available":
            return SlurmStep(SlurmOutcome.LEFT_ALONE, name, current.reason,
                             f"already {current.state.value} by someone else; their reason kept")
        backend.drain(name, reason)
        return SlurmStep(SlurmOutcome.DRAINED, name, reason)
    healthy = report.status in (Status.OK, Status.WARNING)
    if current.state.value in ("drained", "draining", "down"):
        if not current.ours:
            return SlurmStep(SlurmOutcome.LEFT_ALONE, name, current.reason,
                             "drained by someone else: never resumed by minutiae")
        if healthy:
            backend.resume(name)
            return SlurmStep(SlurmOutcome.RESUMED, name, current.reason, "healthy again")
        return SlurmStep(SlurmOutcome.NOTHING, name, current.reason,
                         f"status {report.status.label}: not resuming until the node checks OK")
    return SlurmStep(SlurmOutcome.NOTHING, name, None)

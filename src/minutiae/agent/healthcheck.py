"""What ``minutiae check --slurm`` does with a ``NodeReport`` (HealthCheckProgram semantics).

- the node needs ``reset_gpu`` or more → drain it with ``minutiae[hcp]: <reason>`` (a node
  already drained or down by an admin, another tool or the controller keeps its state and reason);
- the node is healthy (OK or WARNING, nothing that drains) and *we* (``hcp``) drained it → resume;
- anything else (UNKNOWN: could not tell; a drain that is not ours — the controller's
  ``minutiae[<cluster>/<controller>]:``, a plain ``minutiae:`` of an older version, an admin's)
  → leave the node alone. The backend must be made with ``owner=HCP_OWNER``.

Kernel-log faults are events from the past: when an admin resumes a node we drained for them
(after a GPU reset, say), ``check_with_slurm`` remembers that in the state file and does not
drain again for the same faults unless they happen again. Counter faults (a pending row remap,
a port down) are current conditions and drain again while they last.
Pure apart from the injected ``SchedulerBackend`` (and the state file in ``check_with_slurm``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

from minutiae.clock import Clock
from minutiae.errors import InputError
from minutiae.model import Finding, Severity, Status
from minutiae.node.check import CheckConfig, NodeReport, reason_for, run_check
from minutiae.node.memory import CheckMemory, finding_key
from minutiae.schedulers.base import HCP_OWNER, NodeSchedState, SchedulerBackend, make_reason


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
    acknowledged: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"outcome": self.outcome.value, "node": self.node, "reason": self.reason,
                "detail": self.detail, "acknowledged": list(self.acknowledged)}


_DRAINED = (NodeSchedState.DRAINED, NodeSchedState.DRAINING, NodeSchedState.DOWN)


def slurm_step(report: NodeReport, backend: SchedulerBackend, node: str | None = None,
               memory: CheckMemory | None = None) -> SlurmStep:
    """Apply the report to the scheduler. Raises ``BackendUnavailable``/``BackendError``.
    With ``memory`` (kernel-log state), acknowledged kernel-log faults do not drain."""
    name = node or report.node
    current = backend.state(name)
    acked: list[str] = []
    if memory is not None and memory.drained_for and current.state is NodeSchedState.AVAILABLE:
        acked = memory.acknowledge_drain()  # someone resumed our drain: they dealt with it
    log_keys = {finding_key(f) for f in memory.log_findings} if memory is not None else set()

    def ack(f: Finding) -> bool:
        return memory is not None and finding_key(f) in log_keys and memory.is_acknowledged(f)

    drainers = [f for f in report.findings if f.action.drains and not ack(f)]
    if drainers:
        reason = make_reason(reason_for(drainers) or "needs a reset or more", HCP_OWNER)
        if memory is not None:
            memory.drained_for = [finding_key(f) for f in drainers if finding_key(f) in log_keys]
        if current.state in _DRAINED and not current.ours:
            return SlurmStep(SlurmOutcome.LEFT_ALONE, name, current.reason,
                             f"already {current.state.value} by someone else; their reason kept",
                             tuple(acked))
        if current.reason == reason and current.ours:
            return SlurmStep(SlurmOutcome.ALREADY_DRAINED, name, reason, "already drained by minutiae",
                             tuple(acked))
        backend.drain(name, reason)
        return SlurmStep(SlurmOutcome.DRAINED, name, reason, "", tuple(acked))
    if memory is not None:
        memory.drained_for = []
    # healthy: every check could be read and nothing error-or-worse remains unacknowledged
    # (without acknowledgements this is exactly status OK or WARNING)
    healthy = all(r.status is not Status.UNKNOWN for r in report.results) and not any(
        f.severity >= Severity.ERROR and not ack(f) for f in report.findings)
    if current.state in _DRAINED:
        if not current.ours:
            return SlurmStep(SlurmOutcome.LEFT_ALONE, name, current.reason,
                             "drained by someone else: never resumed by minutiae", tuple(acked))
        if healthy:
            backend.resume(name)
            return SlurmStep(SlurmOutcome.RESUMED, name, current.reason, "healthy again", tuple(acked))
        return SlurmStep(SlurmOutcome.NOTHING, name, current.reason,
                         f"status {report.status.label}: not resuming until the node checks OK",
                         tuple(acked))
    return SlurmStep(SlurmOutcome.NOTHING, name, None,
                     "acknowledged by the admin's resume" if acked else "", tuple(acked))


def check_with_slurm(cfg: CheckConfig, clock: Clock, backend: SchedulerBackend) -> tuple[NodeReport, SlurmStep]:
    """``run_check`` + ``slurm_step`` sharing the state file (so acknowledgements persist)."""
    from minutiae.node.memory_file import load_state, save_state

    notes: list[str] = []
    memory = CheckMemory()
    if cfg.state_file is not None:
        try:
            memory = load_state(cfg.state_file)
        except InputError as exc:
            notes.append(str(exc))
    report = run_check(cfg, clock, memory=memory)
    step = slurm_step(report, backend, cfg.node, memory)
    if cfg.state_file is not None:
        try:
            save_state(cfg.state_file, memory, report.time)
        except InputError as exc:
            notes.append(str(exc))
    if notes:
        report = dataclasses.replace(report, notes=report.notes + tuple(notes))
    return report, step


__all__ = ["SlurmOutcome", "SlurmStep", "check_with_slurm", "slurm_step"]

"""Actions that did not land: recovery of ``pending`` audit rows after a crash, and retries with
backoff of resumes and escalations that failed (slurmctld restarting, the API server away).

A failed drain needs no queue: the node is still available and unhealthy, so the next step
decides the drain again. A failed resume or escalation would otherwise wait for the next
healthy delay (or never happen): it is retried at 5 s, 10 s, 20 s … (capped at 5 min), each
attempt finishing the same audit row, until it lands or ``max_attempts`` are spent (then it is
given up, said in ``status`` problems). A retry is dropped when the node was drained again
since (memory says so) or the decision no longer stands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minutiae.controller.ha.replicas import claim
from minutiae.controller.state import Decision, Verb
from minutiae.controller.store import DONE, DRY_RUN, FAILED, AuditRow
from minutiae.errors import BackendUnavailable, MinutiaeError
from minutiae.schedulers.base import NodeSchedState

if TYPE_CHECKING:
    from minutiae.controller.service import Controller

_BUSY = (NodeSchedState.DRAINED, NodeSchedState.DRAINING)


@dataclass(slots=True)
class Retry:
    audit_id: int
    node: str
    action: Verb
    step: str | None
    attempts: int
    next_at: float
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"audit": self.audit_id, "node": self.node, "action": self.action.value,
                "attempts": self.attempts, "next_at": self.next_at, "last_error": self.error}


class Retries:
    """Failed resumes/escalations waiting for their next attempt (bounded: one per node)."""

    def __init__(self, base_s: float = 5.0, max_s: float = 300.0, max_attempts: int = 8) -> None:
        self.base_s, self.max_s, self.max_attempts = base_s, max_s, max_attempts
        self.waiting: dict[str, Retry] = {}

    def add(self, d: Decision, audit_id: int, error: str, now: float) -> None:
        if d.action in (Verb.RESUME, Verb.ESCALATE):
            self.waiting[d.node] = Retry(audit_id, d.node, d.action,
                                         d.step.label if d.step else None, 1,
                                         now + self.base_s, error)

    def drop(self, node: str) -> None:
        self.waiting.pop(node, None)

    def to_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in sorted(self.waiting.values(), key=lambda r: r.next_at)]


def retry_due(ctl: Controller, now: float) -> None:
    """Attempt every retry whose time has come (called once per step by the leader)."""
    q = ctl.retries
    for r in [r for r in q.waiting.values() if r.next_at <= now]:
        m = ctl.memory.nodes.get(r.node)
        if r.action is Verb.RESUME and m is not None and m.drained_at is not None:
            q.drop(r.node)  # drained again since: the resume no longer stands
            continue
        try:
            ctl._apply(r.action.value, r.node, None, r.step)
        except MinutiaeError as exc:
            r.attempts += 1
            r.error = str(exc)
            if r.attempts > q.max_attempts:
                q.drop(r.node)
                ctl.store.finish(r.audit_id, FAILED, f"gave up after {q.max_attempts} "
                                 f"attempts: {exc}", now)
                ctl.problem(f"gave up {r.action.value} {r.node} (audit {r.audit_id}) after "
                            f"{q.max_attempts} attempts: {exc}")
            else:
                r.next_at = now + min(q.max_s, q.base_s * 2 ** (r.attempts - 1))
            continue
        q.drop(r.node)
        ctl._sched.pop(r.node, None)  # re-read at the next step
        ctl._touched.add(r.node)
        ctl.store.finish(r.audit_id, DONE, f"done on attempt {r.attempts + 1}", now)
        with ctl._lock:
            ctl.counters.actions_done += 1


def retry_pending(ctl: Controller) -> list[AuditRow]:
    """Finish every ``pending`` audit row (left by a crash mid-batch): confirm it when the
    scheduler already shows it done, else do it now. Returns the rows handled."""
    done: list[AuditRow] = []
    epoch = ctl.leadership.fence()
    for row in ctl.store.pending():
        now = ctl.clock.now()
        if not claim(ctl.store, row.id, epoch, ctl.problem):
            break  # not the leader (any more), fenced off, or another replica has it
        if row.dry_run:
            ctl.store.finish(row.id, DRY_RUN, "dry-run (recovered on restart)", now)
            done.append(row)
            continue
        try:
            st = ctl.backend.state(row.node)
            if row.action == Verb.DRAIN.value and st.state in _BUSY and st.ours:
                ctl.store.finish(row.id, DONE, "confirmed on restart: already drained", now)
            elif row.action == Verb.DRAIN.value and st.state in _BUSY:
                ctl.store.finish(row.id, FAILED, f"on restart: node drained by someone "
                                 f"else ({st.reason!r}); left alone", now)
            elif row.action == Verb.RESUME.value and st.state is NodeSchedState.AVAILABLE:
                ctl.store.finish(row.id, DONE, "confirmed on restart: already resumed", now)
            else:
                ctl._apply(row.action, row.node, row.reason, row.step)
                ctl.store.finish(row.id, DONE, "completed on restart", now)
                with ctl._lock:
                    ctl.counters.actions_done += 1
            done.append(row)
        except BackendUnavailable as exc:
            ctl.problem(f"pending {row.action} {row.node} (audit {row.id}) not recovered "
                        f"yet: {exc}")
            break
        except MinutiaeError as exc:
            ctl.store.finish(row.id, FAILED, f"on restart: {exc}", now)
            done.append(row)
    return done

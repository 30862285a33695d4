"""What a replica does beside the leader election: read the reports the other replicas took
(every replica ingests; PostgreSQL's ``nodes.seq``, bodies only for what changed), and claim a pending audit row under the
current epoch before finishing it (so two leaders never both finish one row)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from minutiae.controller.intake import Intake
from minutiae.controller.leadership import Leadership
from minutiae.controller.state import ControllerMemory, Plan
from minutiae.controller.store.base import ControllerStore
from minutiae.errors import StoreError

__all__ = ["claim", "fenced_batch", "pull_reports"]


def pull_reports(store: ControllerStore, intake: Intake, lock: threading.Lock, cursor: int,
                 problem: Callable[[str], None]) -> int:
    """Load into ``intake`` the reports other replicas stored after ``cursor`` and that are
    newer than the one kept here; returns the next cursor (unchanged when the store failed).
    A row whose digest is the one we hold (a heartbeat, or the same report) only re-dates
    ours; only the others' bodies are read and parsed."""
    try:
        metas, nxt = store.reports_since(cursor)
        with lock:
            have, digests = intake.reports, intake.digests
            need = [n for n, t, d in metas if ((p := have.get(n)) is None or p.time < t)
                    and not (d is not None and digests.get(n) == d and intake.redate(n, t))]
        rows = store.report_bodies(need) if need else []
    except StoreError as exc:
        problem(f"could not read the other replicas' reports: {exc}")
        return cursor
    with lock:
        have = intake.reports
        fresh = [r for r in rows if (p := have.get(r[0])) is None or p.time < r[1]]
        lines = intake.load(fresh)
    for line in lines:
        problem(line)
    return nxt


def claim(store: ControllerStore, audit_id: int, epoch: int | None,
          problem: Callable[[str], None]) -> bool:
    """True when this leader (``epoch``) now owns pending row ``audit_id``; False when it is
    not the leader, was fenced off or the store failed (then stop recovering)."""
    if epoch is None:
        return False
    try:
        return store.claim(audit_id, epoch)
    except StoreError as exc:
        problem(f"pending audit {audit_id} not recovered: {exc}")
        return False


def fenced_batch(store: ControllerStore, leadership: Leadership, plan: Plan,
                 before: ControllerMemory, dry_run: bool, problem: Callable[[str], None]
                 ) -> list[int] | None:
    """The audit-before-act insert under the leader's current epoch; None (and a problem line)
    when this controller is not the leader or the store refused the epoch: then nothing may
    be done and the memory stays as it was."""
    epoch = leadership.fence()
    if epoch is None:
        problem("not acting: lost the lead during the step")
        return None
    try:
        return store.begin_batch(plan.memory, before, plan.decisions, dry_run, epoch=epoch)
    except StoreError as exc:
        problem(f"not acting: {exc}")
        return None

"""The store seam: what the controller needs from its store, whatever the engine.

Both engines (``sqlite.py``: one file, the embedded default; ``postgres.py``: shared by several
replicas) write the same rows with the same SQL: statements here use ``?`` placeholders and the
PostgreSQL store turns them into ``%s``. ``begin_batch`` is the audit-before-act transaction:
the next memory plus one ``pending`` audit row per action, committed before any action runs.
With an ``epoch`` (the leader's fencing token) the PostgreSQL store checks, in that same
transaction, that the epoch is still the current one, so a deposed leader's batch fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from minutiae.controller.budget import Bucket
from minutiae.controller.state import ControllerMemory, Decision, NodeMemory, Pause

__all__ = ["AUDIT_COLUMNS", "DONE", "DRY_RUN", "FAILED", "HELD", "PENDING", "AuditRow",
           "ControllerStore", "Exec", "audit_query", "insert_audit", "memory_from", "put_kv", "row",
           "save_memory"]

#: audit row statuses
PENDING, DONE, FAILED, DRY_RUN, HELD = "pending", "done", "failed", "dry_run", "held"

#: run one statement (``?`` placeholders) in the current transaction; returns a cursor
Exec = Callable[[str, Sequence[Any]], Any]


@dataclass(frozen=True, slots=True)
class AuditRow:
    id: int
    time: float
    node: str
    action: str
    wanted: str | None
    rule: str
    step: str | None
    reason: str | None
    evidence: tuple[str, ...]
    budget: Mapping[str, Any]
    undo: str
    dry_run: bool
    status: str
    detail: str | None
    done_time: float | None
    #: the leader's epoch (fencing token) the row was written under; None before HA
    epoch: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "time": self.time, "node": self.node, "action": self.action,
                "wanted": self.wanted, "rule": self.rule, "step": self.step,
                "reason": self.reason, "evidence": list(self.evidence),
                "budget": dict(self.budget), "undo": self.undo, "dry_run": self.dry_run,
                "status": self.status, "detail": self.detail, "done_time": self.done_time,
                "epoch": self.epoch}


class ControllerStore(Protocol):
    """What ``Controller`` and the HTTP routes use; ``Store`` (SQLite) and ``PgStore``."""

    path: str

    def save_reports(self, rows: Iterable[tuple[str, float, str, str, str]],
                     beats: Iterable[tuple[float, str]] = (), wake: bool = False) -> None:
        """Full reports (node, received, body, domains, digest) and heartbeats (received,
        node), in one transaction; a stored report is never replaced by an older one.
        ``wake``: tell the other replicas (PostgreSQL: NOTIFY) a report changed a node."""
        ...
    def load_reports(self) -> list[tuple[str, float, str, str]]: ...
    def reports_since(self, cursor: int) -> tuple[list[tuple[str, float, str | None]], int]:
        """(node, received, digest) of what other replicas stored after ``cursor``; returns
        them and the next cursor."""
        ...
    def report_bodies(self, nodes: Sequence[str]) -> list[tuple[str, float, str, str]]:
        """The stored (node, received, report, domains) of ``nodes``."""
        ...
    def load_memory(self) -> ControllerMemory: ...
    def get_kv(self, key: str) -> Any: ...
    def set_kv(self, key: str, value: Any) -> None: ...
    def begin_batch(self, memory: ControllerMemory, before: ControllerMemory,
                    decisions: Sequence[Decision], dry_run: bool,
                    epoch: int | None = None) -> list[int]: ...
    def claim(self, audit_id: int, epoch: int) -> bool:
        """Take a pending row (fenced by ``epoch`` where the engine can): True if still pending."""
        ...
    def finish(self, audit_id: int, status: str, detail: str | None, when: float) -> None: ...
    def pending(self) -> list[AuditRow]: ...
    def audit(self, node: str | None = None, status: str | None = None, limit: int = 100,
              ascending: bool = False) -> list[AuditRow]: ...
    def save_pause(self, pause: Pause | None, breaker_since: float | None) -> None: ...
    def save_timings(self, rows: Sequence[tuple[str, int, int | None, str | None, float, float]]
                     ) -> None: ...
    def job_timings(self, job: str) -> list[tuple[int, int | None, str | None, float, float]]:
        ...
    def set_tolerance(self, job: str, nodes: int | None, when: float) -> None: ...
    def tolerances(self) -> dict[str, int]: ...
    def count_timings(self, job: str) -> int: ...
    def close(self) -> None: ...


def put_kv(ex: Exec, key: str, value: Any) -> None:
    ex("INSERT INTO kv(key, data) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET "
       "data=excluded.data", (key, json.dumps(value)))


def save_memory(ex: Exec, m: ControllerMemory, before: ControllerMemory) -> None:
    for node, nm in m.nodes.items():
        if before.nodes.get(node) != nm:
            ex("INSERT INTO memory(node, data) VALUES(?, ?) ON CONFLICT(node) DO UPDATE "
               "SET data=excluded.data", (node, json.dumps(nm.to_json())))
    for node in before.nodes:
        if node not in m.nodes:
            ex("DELETE FROM memory WHERE node=?", (node,))
    if m.buckets != before.buckets:
        put_kv(ex, "buckets", {k: [b.tokens, b.t] for k, b in m.buckets.items()})
    if m.pause != before.pause or m.breaker_since != before.breaker_since:
        put_kv(ex, "pause", None if m.pause is None else
               {"reason": m.pause.reason, "since": m.pause.since, "by": m.pause.by})
        put_kv(ex, "breaker_since", m.breaker_since)


def insert_audit(ex: Exec, d: Decision, dry_run: bool, status: str,
                 epoch: int | None = None) -> int:
    cur = ex(
        "INSERT INTO audit(time, node, action, wanted, rule, step, reason, evidence, budget, "
        "undo, dry_run, status, epoch) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id",
        (d.time, d.node, d.action.value, d.wanted.value if d.wanted else None, d.rule,
         d.step.label if d.step else None, d.reason, json.dumps(list(d.evidence)),
         json.dumps(d.budget.to_json()), d.undo, int(dry_run), status, epoch))
    got = cur.fetchone()
    return int(got[0])


AUDIT_COLUMNS = ("id, time, node, action, wanted, rule, step, reason, evidence, budget, undo, "
                 "dry_run, status, detail, done_time, epoch")


def row(r: Sequence[Any]) -> AuditRow:
    return AuditRow(id=int(r[0]), time=r[1], node=r[2], action=r[3], wanted=r[4], rule=r[5],
                    step=r[6], reason=r[7], evidence=tuple(json.loads(r[8])),
                    budget=json.loads(r[9]), undo=r[10], dry_run=bool(r[11]), status=r[12],
                    detail=r[13], done_time=r[14],
                    epoch=None if r[15] is None else int(r[15]))


def audit_query(node: str | None, status: str | None, limit: int,
                ascending: bool) -> tuple[str, list[Any]]:
    q = f"SELECT {AUDIT_COLUMNS} FROM audit"
    where: list[str] = []
    args: list[Any] = []
    if node is not None:
        where.append("node=?")
        args.append(node)
    if status is not None:
        where.append("status=?")
        args.append(status)
    if where:
        q += " WHERE " + " AND ".join(where)
    q += f" ORDER BY id {'ASC' if ascending else 'DESC'} LIMIT ?"
    args.append(int(limit))
    return q, args


def memory_from(memory_rows: Iterable[Sequence[Any]], kv_rows: Iterable[Sequence[Any]]
                ) -> ControllerMemory:
    """The controller memory from ``(node, data)`` memory rows and ``(key, data)`` kv rows."""
    nodes = {n: NodeMemory.from_json(json.loads(d)) for n, d in memory_rows}
    kv = {k: json.loads(d) for k, d in kv_rows}
    buckets = {k: Bucket(float(v[0]), float(v[1])) for k, v in kv.get("buckets", {}).items()}
    p = kv.get("pause")
    pause = Pause(p["reason"], p["since"], p.get("by", "human")) if p else None
    return ControllerMemory(nodes=nodes, buckets=buckets, pause=pause,
                            breaker_since=kv.get("breaker_since"))

"""The controller's SQLite store (WAL): latest report per node, controller memory, the pause
switch, token buckets, the audit log and job step timings.

The audit log is the safety net: a batch's actions are written ``pending`` together with the
next memory in one transaction *before* any of them runs; each is then marked ``done``,
``failed`` or ``dry_run``. On start the controller re-checks every ``pending`` row against the
scheduler (see ``Controller.recover``), so a kill -9 mid-batch loses no action and does none
twice. Every connection is per-thread (sqlite3 objects are not shared between threads).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minutiae.controller.budget import Bucket
from minutiae.controller.state import ControllerMemory, Decision, NodeMemory, Pause
from minutiae.errors import StoreError

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes(node TEXT PRIMARY KEY, received REAL NOT NULL,
    report TEXT NOT NULL, domains TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memory(node TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kv(key TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS audit(
    id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, node TEXT NOT NULL,
    action TEXT NOT NULL, wanted TEXT, rule TEXT NOT NULL, step TEXT, reason TEXT,
    evidence TEXT NOT NULL, budget TEXT NOT NULL, undo TEXT NOT NULL, dry_run INTEGER NOT NULL,
    status TEXT NOT NULL, detail TEXT, done_time REAL);
CREATE INDEX IF NOT EXISTS audit_node ON audit(node, id);
CREATE INDEX IF NOT EXISTS audit_status ON audit(status);
CREATE TABLE IF NOT EXISTS timings(job TEXT NOT NULL, step INTEGER NOT NULL, rank INTEGER,
    node TEXT, seconds REAL NOT NULL, received REAL NOT NULL);
CREATE INDEX IF NOT EXISTS timings_job ON timings(job);
CREATE TABLE IF NOT EXISTS job_tolerance(job TEXT PRIMARY KEY, nodes INTEGER NOT NULL,
    time REAL NOT NULL);
"""

#: audit row statuses
PENDING, DONE, FAILED, DRY_RUN, HELD = "pending", "done", "failed", "dry_run", "held"


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

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "time": self.time, "node": self.node, "action": self.action,
                "wanted": self.wanted, "rule": self.rule, "step": self.step,
                "reason": self.reason, "evidence": list(self.evidence),
                "budget": dict(self.budget), "undo": self.undo, "dry_run": self.dry_run,
                "status": self.status, "detail": self.detail, "done_time": self.done_time}


class Store:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._local = threading.local()
        try:
            c = self._conn()
            c.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open store: {exc}") from None

    def _conn(self) -> sqlite3.Connection:
        c: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if c is None:
            try:
                c = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
                c.execute("PRAGMA journal_mode=WAL")
                c.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: cannot open store: {exc}") from None
            self._local.conn = c
        return c

    def _tx(self, fn: Any) -> Any:
        c = self._conn()
        try:
            c.execute("BEGIN IMMEDIATE")
            try:
                out = fn(c)
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
            return out
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from None

    def close(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    # ---- reports -------------------------------------------------------------------------
    def save_reports(self, rows: Iterable[tuple[str, float, str, str]],
                     beats: Iterable[tuple[float, str]] = ()) -> None:
        """Upsert (node, received, report JSON, domains JSON) rows and re-date unchanged
        reports (heartbeats: (received, node)) in one transaction."""
        rows, beats = list(rows), list(beats)
        if rows or beats:
            def tx(c: sqlite3.Connection) -> None:
                c.executemany(
                    "INSERT INTO nodes(node, received, report, domains) VALUES(?,?,?,?) "
                    "ON CONFLICT(node) DO UPDATE SET received=excluded.received, "
                    "report=excluded.report, domains=excluded.domains", rows)
                c.executemany("UPDATE nodes SET received=? WHERE node=?", beats)
            self._tx(tx)

    def load_reports(self) -> list[tuple[str, float, str, str]]:
        return list(self._conn().execute("SELECT node, received, report, domains FROM nodes"))

    # ---- memory / kv ---------------------------------------------------------------------
    def load_memory(self) -> ControllerMemory:
        c = self._conn()
        nodes = {n: NodeMemory.from_json(json.loads(d))
                 for n, d in c.execute("SELECT node, data FROM memory")}
        kv = {k: json.loads(d) for k, d in c.execute("SELECT key, data FROM kv")}
        buckets = {k: Bucket(float(v[0]), float(v[1])) for k, v in kv.get("buckets", {}).items()}
        p = kv.get("pause")
        pause = Pause(p["reason"], p["since"], p.get("by", "human")) if p else None
        return ControllerMemory(nodes=nodes, buckets=buckets, pause=pause,
                                breaker_since=kv.get("breaker_since"))

    def get_kv(self, key: str) -> Any:
        row = self._conn().execute("SELECT data FROM kv WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def set_kv(self, key: str, value: Any) -> None:
        self._tx(lambda c: _put_kv(c, key, value))

    # ---- a reconcile batch ---------------------------------------------------------------
    def begin_batch(self, memory: ControllerMemory, before: ControllerMemory,
                    decisions: Sequence[Decision], dry_run: bool) -> list[int]:
        """One transaction: the next memory plus an audit row per decision (``pending`` for
        actions, ``held`` for new holds). Returns the ids of the pending rows, in order."""

        def tx(c: sqlite3.Connection) -> list[int]:
            _save_memory(c, memory, before)
            ids: list[int] = []
            for d in decisions:
                if d.action.value == "hold":
                    if d.new:
                        _insert_audit(c, d, dry_run, HELD)
                    continue
                ids.append(_insert_audit(c, d, dry_run, PENDING))
            return ids

        out: list[int] = self._tx(tx)
        return out

    def finish(self, audit_id: int, status: str, detail: str | None, when: float) -> None:
        self._tx(lambda c: c.execute(
            "UPDATE audit SET status=?, detail=?, done_time=? WHERE id=?",
            (status, detail, when, audit_id)))

    def pending(self) -> list[AuditRow]:
        return self.audit(status=PENDING, limit=100_000, ascending=True)

    def audit(self, node: str | None = None, status: str | None = None, limit: int = 100,
              ascending: bool = False) -> list[AuditRow]:
        q = "SELECT * FROM audit"
        where, args = [], []
        if node is not None:
            where.append("node=?")
            args.append(node)
        if status is not None:
            where.append("status=?")
            args.append(status)
        if where:
            q += " WHERE " + " AND ".join(where)
        q += f" ORDER BY id {'ASC' if ascending else 'DESC'} LIMIT ?"
        args.append(str(int(limit)))
        return [_row(r) for r in self._conn().execute(q, args)]

    # ---- pause ---------------------------------------------------------------------------
    def save_pause(self, pause: Pause | None, breaker_since: float | None) -> None:
        def tx(c: sqlite3.Connection) -> None:
            _put_kv(c, "pause", None if pause is None else
                    {"reason": pause.reason, "since": pause.since, "by": pause.by})
            _put_kv(c, "breaker_since", breaker_since)
        self._tx(tx)

    # ---- timings -------------------------------------------------------------------------
    def save_timings(self, rows: Sequence[tuple[str, int, int | None, str | None, float, float]]
                     ) -> None:
        self._tx(lambda c: c.executemany(
            "INSERT INTO timings(job, step, rank, node, seconds, received) VALUES(?,?,?,?,?,?)",
            rows))

    def job_timings(self, job: str) -> list[tuple[int, int | None, str | None, float, float]]:
        """(step, rank, node, seconds, received) of every timing of ``job``."""
        return list(self._conn().execute(
            "SELECT step, rank, node, seconds, received FROM timings WHERE job=?", (job,)))

    # ---- per-job tolerance ---------------------------------------------------------------
    def set_tolerance(self, job: str, nodes: int | None, when: float) -> None:
        """How many nodes ``job`` survives losing (None: forget it, the policy decides)."""
        if nodes is None:
            self._tx(lambda c: c.execute("DELETE FROM job_tolerance WHERE job=?", (job,)))
        else:
            self._tx(lambda c: c.execute(
                "INSERT INTO job_tolerance(job, nodes, time) VALUES(?,?,?) ON CONFLICT(job) "
                "DO UPDATE SET nodes=excluded.nodes, time=excluded.time", (job, nodes, when)))

    def tolerances(self) -> dict[str, int]:
        return {j: int(n) for j, n in self._conn().execute(
            "SELECT job, nodes FROM job_tolerance")}

    def count_timings(self, job: str) -> int:
        row = self._conn().execute("SELECT COUNT(*) FROM timings WHERE job=?", (job,)).fetchone()
        return int(row[0])


def _put_kv(c: sqlite3.Connection, key: str, value: Any) -> None:
    c.execute("INSERT INTO kv(key, data) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET "
              "data=excluded.data", (key, json.dumps(value)))


def _save_memory(c: sqlite3.Connection, m: ControllerMemory, before: ControllerMemory) -> None:
    for node, nm in m.nodes.items():
        if before.nodes.get(node) != nm:
            c.execute("INSERT INTO memory(node, data) VALUES(?, ?) ON CONFLICT(node) DO UPDATE "
                      "SET data=excluded.data", (node, json.dumps(nm.to_json())))
    for node in before.nodes:
        if node not in m.nodes:
            c.execute("DELETE FROM memory WHERE node=?", (node,))
    if m.buckets != before.buckets:
        _put_kv(c, "buckets", {k: [b.tokens, b.t] for k, b in m.buckets.items()})
    if m.pause != before.pause or m.breaker_since != before.breaker_since:
        _put_kv(c, "pause", None if m.pause is None else
                {"reason": m.pause.reason, "since": m.pause.since, "by": m.pause.by})
        _put_kv(c, "breaker_since", m.breaker_since)


def _insert_audit(c: sqlite3.Connection, d: Decision, dry_run: bool, status: str) -> int:
    cur = c.execute(
        "INSERT INTO audit(time, node, action, wanted, rule, step, reason, evidence, budget, "
        "undo, dry_run, status) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
        (d.time, d.node, d.action.value, d.wanted.value if d.wanted else None, d.rule,
         d.step.label if d.step else None, d.reason, json.dumps(list(d.evidence)),
         json.dumps(d.budget.to_json()), d.undo, int(dry_run), status))
    return int(cur.lastrowid or 0)


def _row(r: Sequence[Any]) -> AuditRow:
    return AuditRow(id=r[0], time=r[1], node=r[2], action=r[3], wanted=r[4], rule=r[5],
                    step=r[6], reason=r[7], evidence=tuple(json.loads(r[8])),
                    budget=json.loads(r[9]), undo=r[10], dry_run=bool(r[11]), status=r[12],
                    detail=r[13], done_time=r[14])

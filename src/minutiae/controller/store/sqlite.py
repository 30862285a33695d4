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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from minutiae.controller.state import ControllerMemory, Decision, Pause
from minutiae.controller.store.base import (
    HELD,
    PENDING,
    AuditRow,
    audit_query,
    insert_audit,
    memory_from,
    put_kv,
    row,
    save_memory,
)
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
    status TEXT NOT NULL, detail TEXT, done_time REAL, epoch INTEGER);
CREATE INDEX IF NOT EXISTS audit_node ON audit(node, id);
CREATE INDEX IF NOT EXISTS audit_status ON audit(status);
CREATE TABLE IF NOT EXISTS timings(job TEXT NOT NULL, step INTEGER NOT NULL, rank INTEGER,
    node TEXT, seconds REAL NOT NULL, received REAL NOT NULL);
CREATE INDEX IF NOT EXISTS timings_job ON timings(job);
CREATE TABLE IF NOT EXISTS job_tolerance(job TEXT PRIMARY KEY, nodes INTEGER NOT NULL,
    time REAL NOT NULL);
"""

class Store:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._local = threading.local()
        try:
            c = self._conn()
            c.executescript(SCHEMA)
            cols = {r[1] for r in c.execute("PRAGMA table_info(audit)")}
            if "epoch" not in cols:  # a store from before the fencing token
                c.execute("ALTER TABLE audit ADD COLUMN epoch INTEGER")
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
    def save_reports(self, rows: Iterable[tuple[str, float, str, str, str]],
                     beats: Iterable[tuple[float, str]] = (), wake: bool = False) -> None:
        """Upsert (node, received, report JSON, domains JSON, digest) rows and re-date
        unchanged reports (heartbeats: (received, node)) in one transaction."""
        rows, beats = list(rows), list(beats)
        if rows or beats:
            def tx(c: sqlite3.Connection) -> None:
                c.executemany(
                    "INSERT INTO nodes(node, received, report, domains) VALUES(?,?,?,?) "
                    "ON CONFLICT(node) DO UPDATE SET received=excluded.received, "
                    "report=excluded.report, domains=excluded.domains "
                    "WHERE nodes.received <= excluded.received", [r[:4] for r in rows])
                c.executemany("UPDATE nodes SET received=? WHERE node=? AND received < ?",
                              [(t, n, t) for t, n in beats])
            self._tx(tx)

    def load_reports(self) -> list[tuple[str, float, str, str]]:
        return list(self._conn().execute("SELECT node, received, report, domains FROM nodes"))

    def reports_since(self, cursor: int) -> tuple[list[tuple[str, float, str | None]], int]:
        """One process per SQLite file: no other replica writes reports."""
        return [], cursor

    def report_bodies(self, nodes: Sequence[str]) -> list[tuple[str, float, str, str]]:
        return [r for r in self.load_reports() if r[0] in set(nodes)]

    # ---- memory / kv ---------------------------------------------------------------------
    def load_memory(self) -> ControllerMemory:
        c = self._conn()
        return memory_from(c.execute("SELECT node, data FROM memory"),
                           c.execute("SELECT key, data FROM kv"))

    def get_kv(self, key: str) -> Any:
        got = self._conn().execute("SELECT data FROM kv WHERE key=?", (key,)).fetchone()
        return json.loads(got[0]) if got else None

    def set_kv(self, key: str, value: Any) -> None:
        self._tx(lambda c: put_kv(c.execute, key, value))

    # ---- a reconcile batch ---------------------------------------------------------------
    def begin_batch(self, memory: ControllerMemory, before: ControllerMemory,
                    decisions: Sequence[Decision], dry_run: bool,
                    epoch: int | None = None) -> list[int]:
        """One transaction: the next memory plus an audit row per decision (``pending`` for
        actions, ``held`` for new holds). Returns the ids of the pending rows, in order.
        ``epoch`` is written into each row (the file lock is the fence here: one actor)."""

        def tx(c: sqlite3.Connection) -> list[int]:
            save_memory(c.execute, memory, before)
            ids: list[int] = []
            for d in decisions:
                if d.action.value == "hold":
                    if d.new:
                        insert_audit(c.execute, d, dry_run, HELD, epoch)
                    continue
                ids.append(insert_audit(c.execute, d, dry_run, PENDING, epoch))
            return ids

        out: list[int] = self._tx(tx)
        return out

    def claim(self, audit_id: int, epoch: int) -> bool:
        """Take a pending row left by an earlier run (the file lock fences: one actor)."""
        out: bool = self._tx(lambda c: c.execute(
            "UPDATE audit SET epoch=? WHERE id=? AND status=?", (epoch, audit_id, PENDING)
        ).rowcount == 1)
        return out

    def finish(self, audit_id: int, status: str, detail: str | None, when: float) -> None:
        self._tx(lambda c: c.execute(
            "UPDATE audit SET status=?, detail=?, done_time=? WHERE id=?",
            (status, detail, when, audit_id)))

    def pending(self) -> list[AuditRow]:
        return self.audit(status=PENDING, limit=100_000, ascending=True)

    def audit(self, node: str | None = None, status: str | None = None, limit: int = 100,
              ascending: bool = False) -> list[AuditRow]:
        q, args = audit_query(node, status, limit, ascending)
        return [row(r) for r in self._conn().execute(q, args)]

    # ---- pause ---------------------------------------------------------------------------
    def save_pause(self, pause: Pause | None, breaker_since: float | None) -> None:
        def tx(c: sqlite3.Connection) -> None:
            put_kv(c.execute, "pause", None if pause is None else
                   {"reason": pause.reason, "since": pause.since, "by": pause.by})
            put_kv(c.execute, "breaker_since", breaker_since)
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



"""The controller's store on PostgreSQL, shared by several ``minutiae serve`` replicas.

Same tables and the same audit-before-act transaction as the SQLite store (the SQL is in
``base.py``), plus:

- ``leader``: one row, the current epoch (fencing token), holder identity and its backend pid
  (written by ``minutiae.controller.ha.pg_lock``). ``begin_batch(..., epoch=e)`` reads it
  ``FOR SHARE`` in the batch's own transaction and fails when ``e`` is no longer current, so a
  deposed leader cannot write a pending action (and the takeover's epoch bump waits for a batch
  already in flight, so none slips in after it);
- ``nodes.seq``/``nodes.writer``/``nodes.digest``: every replica ingests reports and writes
  them here; each replica reads what the others wrote (``reports_since``: node, time and
  digest only; ``report_bodies`` for the reports whose digest it does not hold — a heartbeat
  stored by another replica costs a re-dating, not a parse), so any replica takes any report.
  A report older than the one stored never replaces it (a replayed report is a no-op).
- A take of reports is written in one statement (arrays through ``unnest``, in node order),
  whatever the number of rows: one round trip per group commit, not one per report. The
  pool's connections are in autocommit: a single statement is its own transaction; ``_tx``
  opens one explicitly for the rest.

A small fixed pool (``size`` connections, made on first use) serves every thread of a
replica: never a connection per node or per request.
"""

from __future__ import annotations

import json
import queue
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg

from minutiae.controller.state import ControllerMemory, Decision, Pause
from minutiae.controller.store.base import (
    HELD,
    PENDING,
    AuditRow,
    Exec,
    audit_query,
    insert_audit,
    memory_from,
    put_kv,
    row,
    save_memory,
)
from minutiae.errors import StoreError

__all__ = ["PG_SCHEMA", "PgStore", "redact"]

T = TypeVar("T")

PG_SCHEMA = """
CREATE SEQUENCE IF NOT EXISTS nodes_seq;
CREATE TABLE IF NOT EXISTS nodes(node TEXT PRIMARY KEY, received DOUBLE PRECISION NOT NULL,
    report TEXT NOT NULL, domains TEXT NOT NULL, seq BIGINT NOT NULL DEFAULT nextval('nodes_seq'),
    writer TEXT NOT NULL DEFAULT '');
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS digest TEXT;
CREATE INDEX IF NOT EXISTS nodes_seq_i ON nodes(seq);
CREATE TABLE IF NOT EXISTS memory(node TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kv(key TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS audit(
    id BIGSERIAL PRIMARY KEY, time DOUBLE PRECISION NOT NULL, node TEXT NOT NULL,
    action TEXT NOT NULL, wanted TEXT, rule TEXT NOT NULL, step TEXT, reason TEXT,
    evidence TEXT NOT NULL, budget TEXT NOT NULL, undo TEXT NOT NULL, dry_run INTEGER NOT NULL,
    status TEXT NOT NULL, detail TEXT, done_time DOUBLE PRECISION, epoch BIGINT);
CREATE INDEX IF NOT EXISTS audit_node ON audit(node, id);
CREATE INDEX IF NOT EXISTS audit_status ON audit(status);
CREATE TABLE IF NOT EXISTS timings(job TEXT NOT NULL, step INTEGER NOT NULL, rank INTEGER,
    node TEXT, seconds DOUBLE PRECISION NOT NULL, received DOUBLE PRECISION NOT NULL);
CREATE INDEX IF NOT EXISTS timings_job ON timings(job);
CREATE TABLE IF NOT EXISTS job_tolerance(job TEXT PRIMARY KEY, nodes INTEGER NOT NULL,
    time DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS leader(id INTEGER PRIMARY KEY CHECK (id = 1), epoch BIGINT NOT NULL,
    holder TEXT NOT NULL, backend_pid INTEGER NOT NULL, since DOUBLE PRECISION NOT NULL,
    renewed TIMESTAMPTZ NOT NULL);
"""

#: serializes schema creation between replicas starting together
_SCHEMA_LOCK = 0x6D6E7431  # "mnt1"
#: rows of other replicas re-read behind the cursor (sequence values of transactions that
#: commit out of order); re-reading is harmless: an older report never replaces a newer one
_SEQ_OVERLAP = 1000


#: a take in one statement (one round trip, atomic on its own): full reports (arrays of node,
#: received, report, domains, digest, in node order) upserted, never over a newer one, and
#: heartbeats (node, received) re-dating the stored report, never backwards. A take's nodes
#: are either reports or heartbeats, so the two parts never touch one row.
_SAVE = (
    "WITH up AS (INSERT INTO nodes(node, received, report, domains, digest, writer) "
    "SELECT u.*, ? FROM unnest(%b::text[], %b::float8[], %b::text[], %b::text[], %b::text[]) "
    "AS u(node, received, report, domains, digest) ORDER BY u.node "
    "ON CONFLICT(node) DO UPDATE SET received=excluded.received, report=excluded.report, "
    "domains=excluded.domains, digest=excluded.digest, seq=nextval('nodes_seq'), "
    "writer=excluded.writer WHERE nodes.received <= excluded.received RETURNING 1), "
    "re AS (UPDATE nodes SET received=b.t, seq=nextval('nodes_seq'), writer=? "
    "FROM unnest(%b::text[], %b::float8[]) AS b(node, t) "
    "WHERE nodes.node=b.node AND nodes.received < b.t RETURNING 1) "
    "SELECT (SELECT count(*) FROM up), (SELECT count(*) FROM re), "
    "CASE WHEN ? THEN pg_notify('minutiae_reports', ?) END")
#: the channel a replica's stored report that changes a node wakes the others on
CHANNEL = "minutiae_reports"


def redact(dsn: str) -> str:
    """The DSN without its password (for messages and ``store.path``)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", dsn)


class PgStore:
    def __init__(self, dsn: str, *, identity: str = "minutiae", size: int = 4,
                 connect_timeout_s: float = 5.0) -> None:
        self.dsn = dsn
        self.path = redact(dsn)
        self.identity = identity
        self.size = max(1, size)
        self.connect_timeout_s = connect_timeout_s
        self._idle: queue.LifoQueue[psycopg.Connection[Any]] = queue.LifoQueue()
        self._made = 0
        self._made_lock = threading.Lock()
        self._sql: dict[str, str] = {}

        def schema(ex: Exec) -> None:
            ex("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
            for stmt in PG_SCHEMA.split(";"):
                if stmt.strip():
                    ex(stmt, ())
        self._tx(schema)

    # ---- the pool ------------------------------------------------------------------------
    def connect(self) -> psycopg.Connection[Any]:
        """A new connection of our own (the leadership lock holds one outside the pool)."""
        try:
            return psycopg.connect(self.dsn, connect_timeout=int(self.connect_timeout_s),
                                   application_name=f"minutiae {self.identity}"[:63])
        except psycopg.Error as exc:
            raise StoreError(f"{self.path}: cannot open store: {_one_line(exc)}") from None

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            c = self._idle.get_nowait()
        except queue.Empty:
            with self._made_lock:
                make = self._made < self.size
                if make:
                    self._made += 1
            if make:
                try:
                    c = self.connect()
                    c.autocommit = True   # one statement, one round trip; _tx for the rest
                except BaseException:
                    with self._made_lock:
                        self._made -= 1
                    raise
            else:
                try:
                    c = self._idle.get(timeout=30.0)
                except queue.Empty:
                    raise StoreError(f"{self.path}: all {self.size} store connections busy "
                                     "for 30 s") from None
        broken = False
        try:
            yield c
        except psycopg.OperationalError:
            broken = True
            raise
        finally:
            if broken or c.closed or c.broken:
                c.close()
                with self._made_lock:
                    self._made -= 1
            else:
                self._idle.put(c)

    def _q(self, sql: str) -> str:
        got = self._sql.get(sql)
        if got is None:
            got = self._sql[sql] = sql.replace("?", "%s")
        return got

    def _tx(self, fn: Callable[[Exec], T]) -> T:
        try:
            with self._conn() as c, c.transaction(), c.cursor() as cur:
                def ex(sql: str, args: Sequence[Any]) -> Any:
                    return cur.execute(self._q(sql), tuple(args))
                return fn(ex)
        except psycopg.Error as exc:
            raise StoreError(f"{self.path}: {_one_line(exc)}") from None

    def _one(self, sql: str, args: Sequence[Any] = (), retry: bool = False
             ) -> list[tuple[Any, ...]]:
        """One statement on its own (autocommit: atomic, one round trip); its rows. With
        ``retry``, again (twice at most) when PostgreSQL broke a deadlock by aborting it."""
        for attempt in range(3 if retry else 1):
            try:
                with self._conn() as c, c.cursor() as cur:
                    cur.execute(self._q(sql), tuple(args))
                    return list(cur.fetchall()) if cur.description else []
            except psycopg.errors.DeadlockDetected as exc:
                if attempt == 2 or not retry:
                    raise StoreError(f"{self.path}: {_one_line(exc)}") from None
            except psycopg.Error as exc:
                raise StoreError(f"{self.path}: {_one_line(exc)}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._one(sql, args)

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                break
        with self._made_lock:
            self._made = 0

    # ---- reports -------------------------------------------------------------------------
    def save_reports(self, rows: Iterable[tuple[str, float, str, str, str]],
                     beats: Iterable[tuple[float, str]] = (), wake: bool = False) -> None:
        rows = sorted(rows)
        beats = sorted(beats, key=lambda b: b[1])
        if not rows and not beats:
            return
        me = self.identity
        cols: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)] or [[]] * 5
        self._one(_SAVE, (me, *cols, me, [n for _t, n in beats], [t for t, _n in beats],
                          wake, me), retry=True)

    def listen(self, wake: Callable[[], None], stop: threading.Event | None = None) -> None:
        """Call ``wake`` whenever another replica stored a report that changes a node (its
        NOTIFY), from a thread with a connection of its own (reconnecting after a failure):
        the leader decides on a report a standby took at once, not at its next interval."""
        halt = stop or threading.Event()

        def run() -> None:
            while not halt.is_set():
                try:
                    with self.connect() as c:
                        c.autocommit = True
                        c.execute(f"LISTEN {CHANNEL}")
                        while not halt.is_set():
                            for n in c.notifies(timeout=1.0):
                                if n.payload != self.identity:
                                    wake()
                except (psycopg.Error, StoreError):
                    halt.wait(1.0)
        threading.Thread(target=run, name="minutiae-listen", daemon=True).start()

    def load_reports(self) -> list[tuple[str, float, str, str]]:
        return [(r[0], r[1], r[2], r[3]) for r in
                self._read("SELECT node, received, report, domains FROM nodes")]

    def reports_since(self, cursor: int) -> tuple[list[tuple[str, float, str | None]], int]:
        """(node, received, digest) of the reports other replicas stored after ``cursor`` (a
        ``nodes.seq``), re-reading a little behind it; returns them and the next cursor."""
        got = self._read("SELECT node, received, digest, seq FROM nodes "
                         "WHERE seq > ? AND writer <> ? ORDER BY seq LIMIT 200000",
                         (max(0, cursor - _SEQ_OVERLAP), self.identity))
        top = max([cursor, *(int(r[3]) for r in got)])
        return [(r[0], r[1], r[2]) for r in got], top

    def report_bodies(self, nodes: Sequence[str]) -> list[tuple[str, float, str, str]]:
        """The stored reports of ``nodes``: (node, received, report, domains)."""
        if not nodes:
            return []
        return [(r[0], r[1], r[2], r[3]) for r in self._read(
            "SELECT node, received, report, domains FROM nodes WHERE node = ANY(?)",
            (list(nodes),))]

    # ---- memory / kv ---------------------------------------------------------------------
    def load_memory(self) -> ControllerMemory:
        return self._tx(lambda ex: memory_from(ex("SELECT node, data FROM memory", ()).fetchall(),
                                               ex("SELECT key, data FROM kv", ()).fetchall()))

    def get_kv(self, key: str) -> Any:
        got = self._read("SELECT data FROM kv WHERE key=?", (key,))
        return json.loads(got[0][0]) if got else None

    def set_kv(self, key: str, value: Any) -> None:
        self._tx(lambda ex: put_kv(ex, key, value))

    # ---- a reconcile batch ---------------------------------------------------------------
    def begin_batch(self, memory: ControllerMemory, before: ControllerMemory,
                    decisions: Sequence[Decision], dry_run: bool,
                    epoch: int | None = None) -> list[int]:
        """The audit-before-act transaction; with ``epoch``, fenced: it fails (StoreError,
        nothing written) unless ``epoch`` is the leader table's current one."""

        def tx(ex: Exec) -> list[int]:
            if epoch is not None:
                _check_epoch(ex, epoch, self.path)
            save_memory(ex, memory, before)
            ids: list[int] = []
            for d in decisions:
                if d.action.value == "hold":
                    if d.new:
                        insert_audit(ex, d, dry_run, HELD, epoch)
                    continue
                ids.append(insert_audit(ex, d, dry_run, PENDING, epoch))
            return ids
        return self._tx(tx)

    def set_epoch(self, epoch: int, holder: str, since: float) -> None:
        """Record a leader elected elsewhere (a Kubernetes Lease) as the store's epoch, so the
        fenced inserts refuse the previous holder; never moves the epoch backwards."""
        self._tx(lambda ex: ex(
            "INSERT INTO leader(id, epoch, holder, backend_pid, since, renewed) "
            "VALUES(1, ?, ?, pg_backend_pid(), ?, now()) ON CONFLICT(id) DO UPDATE SET "
            "epoch=GREATEST(leader.epoch, excluded.epoch), holder=excluded.holder, "
            "since=excluded.since, renewed=now() WHERE leader.epoch <= excluded.epoch",
            (epoch, holder, since)))

    def claim(self, audit_id: int, epoch: int) -> bool:
        """Take a pending row left by an earlier leader (fenced like ``begin_batch``): True
        when it is still pending and now carries ``epoch``."""
        def tx(ex: Exec) -> bool:
            _check_epoch(ex, epoch, self.path)
            return bool(ex("UPDATE audit SET epoch=? WHERE id=? AND status=? RETURNING id",
                           (epoch, audit_id, PENDING)).fetchone())
        return self._tx(tx)

    def finish(self, audit_id: int, status: str, detail: str | None, when: float) -> None:
        self._tx(lambda ex: ex("UPDATE audit SET status=?, detail=?, done_time=? WHERE id=?",
                               (status, detail, when, audit_id)))

    def pending(self) -> list[AuditRow]:
        return self.audit(status=PENDING, limit=100_000, ascending=True)

    def audit(self, node: str | None = None, status: str | None = None, limit: int = 100,
              ascending: bool = False) -> list[AuditRow]:
        q, args = audit_query(node, status, limit, ascending)
        return [row(r) for r in self._read(q, args)]

    # ---- pause ---------------------------------------------------------------------------
    def save_pause(self, pause: Pause | None, breaker_since: float | None) -> None:
        def tx(ex: Exec) -> None:
            put_kv(ex, "pause", None if pause is None else
                   {"reason": pause.reason, "since": pause.since, "by": pause.by})
            put_kv(ex, "breaker_since", breaker_since)
        self._tx(tx)

    # ---- timings / tolerance -------------------------------------------------------------
    def save_timings(self, rows: Sequence[tuple[str, int, int | None, str | None, float, float]]
                     ) -> None:
        def tx(ex: Exec) -> None:
            ex("SELECT 1", ()).executemany(self._q(
                "INSERT INTO timings(job, step, rank, node, seconds, received) "
                "VALUES(?,?,?,?,?,?)"), list(rows))
        if rows:
            self._tx(tx)

    def job_timings(self, job: str) -> list[tuple[int, int | None, str | None, float, float]]:
        return [(r[0], r[1], r[2], r[3], r[4]) for r in self._read(
            "SELECT step, rank, node, seconds, received FROM timings WHERE job=?", (job,))]

    def set_tolerance(self, job: str, nodes: int | None, when: float) -> None:
        if nodes is None:
            self._tx(lambda ex: ex("DELETE FROM job_tolerance WHERE job=?", (job,)))
        else:
            self._tx(lambda ex: ex(
                "INSERT INTO job_tolerance(job, nodes, time) VALUES(?,?,?) ON CONFLICT(job) "
                "DO UPDATE SET nodes=excluded.nodes, time=excluded.time", (job, nodes, when)))

    def tolerances(self) -> dict[str, int]:
        return {j: int(n) for j, n in self._read("SELECT job, nodes FROM job_tolerance")}

    def count_timings(self, job: str) -> int:
        return int(self._read("SELECT COUNT(*) FROM timings WHERE job=?", (job,))[0][0])


def _check_epoch(ex: Exec, epoch: int, where: str) -> None:
    got = ex("SELECT epoch, holder FROM leader WHERE id=1 FOR SHARE", ()).fetchone()
    if got is None or int(got[0]) != epoch:
        now = "no leader" if got is None else f"epoch {got[0]} ({got[1]})"
        raise StoreError(f"{where}: fenced: epoch {epoch} is no longer the leader's ({now}); "
                         "not acting")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__

"""Leader election on PostgreSQL: ``pg_advisory_lock`` plus an epoch (fencing token).

One connection of its own (outside the store's pool) holds a session-level advisory lock.
Taking the lock bumps ``leader.epoch`` and writes our identity and backend pid; every renewal
(``renew_s``, a thread of its own via :meth:`start`) re-dates ``leader.renewed`` with the
database's clock and checks the epoch is still ours.

- The holder dies (kill -9, host gone): PostgreSQL drops its session and the lock with it; a
  standby's next try takes it (within ``renew_s``).
- The holder is cut off or frozen (partition, SIGSTOP): its session stays open, so the lock
  stays held. A standby that sees ``renewed`` older than ``ttl_s`` (database time: no clock
  skew between replicas) terminates that backend (``pg_terminate_backend``) and takes over.
- The old leader stops acting on its own first: :meth:`fence` answers None once its last good
  renewal is ``ttl_s / 2`` old (monotonic clock: a jumping wall clock changes nothing), and its
  audit insert fails anyway on the epoch (``PgStore.begin_batch``), so it cannot act.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import psycopg

from minutiae.clock import Clock
from minutiae.controller.leadership import LeaderStatus, Role
from minutiae.controller.store.postgres import PgStore
from minutiae.errors import StoreError

__all__ = ["LOCK_KEY", "PgAdvisoryLeadership"]

#: the advisory lock key every replica of one store competes for
LOCK_KEY = 0x6D6E746C  # "mntl"


class PgAdvisoryLeadership:
    mechanism = "postgres"

    def __init__(self, store: PgStore, identity: str, clock: Clock, *, ttl_s: float = 6.0,
                 renew_s: float = 1.0) -> None:
        self.store = store
        self.identity = identity
        self.clock = clock
        self.ttl_s = ttl_s
        self.renew_s = renew_s
        self._mu = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._epoch: int | None = None
        self._since: float | None = None
        self._good: float = float("-inf")   # monotonic time of the last good renewal's start
        self._error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- protocol ------------------------------------------------------------------------
    def acquire(self) -> bool:
        with self._mu:
            t0 = time.monotonic()
            try:
                if self._epoch is not None:
                    self._renew(t0)
                if self._epoch is None:
                    self._try_take(t0)
                self._error = None
            except (psycopg.Error, StoreError) as exc:
                self._error = " ".join(str(exc).split()) or type(exc).__name__
                self._drop()
            return self._epoch is not None

    def fence(self) -> int | None:
        if self._epoch is None or time.monotonic() - self._good >= self.ttl_s / 2:
            return None
        return self._epoch

    def status(self) -> LeaderStatus:
        if self.fence() is not None:
            return LeaderStatus(Role.LEADER, self._epoch, self.identity, self.mechanism, None,
                                self._since)
        try:
            got = self.store._read("SELECT epoch, holder, since, "
                                   "EXTRACT(EPOCH FROM now() - renewed) FROM leader WHERE id=1")
        except StoreError as exc:
            return LeaderStatus(Role.STANDBY, None, None, self.mechanism,
                                f"store unreachable: not acting ({exc})")
        if not got:
            why = self._error or "no leader yet"
            return LeaderStatus(Role.STANDBY, None, None, self.mechanism,
                                f"{why}: not acting, serving reads")
        epoch, holder, since, age = got[0]
        stale = float(age) > self.ttl_s
        detail = (f"leader {holder} (epoch {epoch}) "
                  + (f"silent for {float(age):.1f} s: taking over" if stale
                     else "holds the advisory lock")
                  + ": not acting, serving reads and taking reports")
        if self._error:
            detail += f"; last try: {self._error}"
        return LeaderStatus(Role.STANDBY, int(epoch), str(holder), self.mechanism, detail,
                            float(since))

    # ---- the renewal thread --------------------------------------------------------------
    def start(self) -> None:
        """Try / renew every ``renew_s`` in a daemon thread (a step may take longer)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="minutiae-leader",
                                            daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.acquire()
            self._stop.wait(self.renew_s)

    def release(self) -> None:
        """Stop renewing and give the lock up (a standby takes it at its next try)."""
        self._stop.set()
        with self._mu:
            self._drop()

    # ---- ours ----------------------------------------------------------------------------
    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = self.store.connect()
            self._conn.autocommit = True
            # a statement that hangs (a frozen peer holding a row lock) must not hang us
            self._conn.execute("SELECT set_config('statement_timeout', %s, false)",
                               (str(int(self.ttl_s * 500)),))
        return self._conn

    def _renew(self, t0: float) -> None:
        c = self._connection()
        got = c.execute("UPDATE leader SET renewed=now() WHERE id=1 AND epoch=%s AND holder=%s "
                        "RETURNING epoch", (self._epoch, self.identity)).fetchone()
        if got is None:   # someone took over (we were terminated or too slow)
            self._error = "deposed: the epoch moved on"
            self._drop()
            return
        self._good = t0

    def _try_take(self, t0: float) -> None:
        c = self._connection()
        # advisory locks are database-wide: the key carries the store's schema, so replica sets
        # (or test runs) on other schemas of the same database never hold each other off
        row = c.execute("SELECT pg_try_advisory_lock(%s, hashtext(current_schema()))",
                        (LOCK_KEY,)).fetchone()
        if not (row and row[0]):
            self._depose_if_silent(c)
            return
        now = self.clock.now()
        with c.transaction():
            got = c.execute(
                "INSERT INTO leader(id, epoch, holder, backend_pid, since, renewed) "
                "VALUES(1, 1, %s, pg_backend_pid(), %s, now()) ON CONFLICT(id) DO UPDATE SET "
                "epoch=leader.epoch+1, holder=excluded.holder, backend_pid=excluded.backend_pid, "
                "since=excluded.since, renewed=excluded.renewed RETURNING epoch",
                (self.identity, now)).fetchone()
        assert got is not None
        self._epoch, self._since, self._good = int(got[0]), now, t0

    def _depose_if_silent(self, c: psycopg.Connection[Any]) -> None:
        """The lock is held: when its holder has not renewed for ``ttl_s``, end every session
        of that replica (the lock's, and its pool's: a batch frozen mid-transaction holds the
        leader row and would block the epoch bump)."""
        c.execute(
            "SELECT pg_terminate_backend(a.pid) FROM leader l JOIN pg_stat_activity a "
            "ON a.pid = l.backend_pid OR a.application_name = left('minutiae ' || l.holder, 63) "
            "WHERE l.id=1 AND now() - l.renewed > make_interval(secs => %s) "
            "AND a.pid <> pg_backend_pid() AND l.holder <> %s", (self.ttl_s, self.identity))

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()   # ends the session: the advisory lock goes with it
        self._conn = None
        self._epoch = None
        self._good = float("-inf")

"""Acknowledge after store: the intake's rows go to the store in group commits.

A report is answered (202) only once it is in the store, so a replica killed after answering
loses nothing (another replica, or the one restarted, has it). Writing each report in its own
transaction would put a store round trip (and, on PostgreSQL, a commit) in every request; here
one writer thread takes *every* row that arrived since its last write (``Intake.take_rows``:
one numbered take, its ticket) and stores them in one transaction, then tells the listeners
(the HTTP layer's waiters, ``minutiae.controller.http.acks``) which ticket is stored or failed.
While a write is in flight the next rows gather, so the number of transactions adapts to the
store's speed, not to the report rate (a group commit).

A failed write gives the rows back (the next take carries them) and fails that take's
waiters: their agents get a 503 and keep the report in their outbox. The outage is said once
(``problem``), and its end too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from minutiae.controller.intake import Intake
from minutiae.controller.latency import Parts
from minutiae.controller.store.base import ControllerStore
from minutiae.errors import MinutiaeError

__all__ = ["Committer"]

#: takes start at most once per this many seconds (rows that arrive meanwhile join the next
#: one): fewer, larger transactions for at most this much more latency; a lone report after
#: a quiet spell is written at once.
#: Each take costs the writer a store round trip and the event loop a wake-up, a timer and
#: the settling of its waiters, whatever its size: with 2 ms, a replica at 2,000 reports/s on
#: a quiet core wrote takes of a few rows and spent more CPU per report than under load
#: (where slow writes made the takes large); 10 ms keeps them at ~20 rows (issue 17)
LINGER_S = 0.010


class Committer:
    """One take of the intake's rows into the store at a time (the step and the writer thread
    both call :meth:`commit`; a lock keeps takes in ticket order)."""

    def __init__(self, intake: Intake, store: ControllerStore,
                 problem: Callable[[str], None]) -> None:
        self.intake = intake
        self.store = store
        self.problem = problem
        #: told ``(ticket, error or None)`` after every take, in ticket order
        self.listeners: list[Callable[[int, str | None], None]] = []
        #: set by every ingest that left a row to store
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._down: str | None = None
        #: rows stored and transactions made (for the benchmark and ``status``)
        self.rows = 0
        self.writes = 0
        #: wall and CPU (this thread's) seconds spent in store writes, summed (the benchmark
        #: tells a write waiting on the store from one waiting for the GIL or a core)
        self.write_s = 0.0
        self.write_cpu_s = 0.0
        #: where each report's latency goes (``minutiae.controller.latency``)
        self.parts = Parts()
        #: the last take's (start, linger before it, write start, write end), perf_counter
        #: seconds, set before the listeners are told
        self.last = (0.0, 0.0, 0.0, 0.0)
        self._linger = 0.0

    def commit(self) -> None:
        """Store what the intake holds (one transaction) and tell the listeners."""
        with self._lock:
            t_take = time.perf_counter()
            take = self.intake.take_rows()
            err = None
            n = len(take.rows) + len(take.beats)
            w0 = time.perf_counter()
            if n:
                c0 = time.thread_time()
                try:
                    self.store.save_reports(take.rows, take.beats, wake=take.wake)
                    self.rows += n
                    self.writes += 1
                    self.write_s += time.perf_counter() - w0
                    self.write_cpu_s += time.thread_time() - c0
                except Exception as exc:  # any failure: the rows wait for the next take and
                    # this take's waiters are told (never acknowledged by a later take)
                    err = str(exc) if isinstance(exc, MinutiaeError) else \
                        f"{type(exc).__name__}: {exc}"
                    self.intake.give_back(take)
            self._say(err, n)
            self.last = (t_take, self._linger, w0, time.perf_counter())
            for tell in self.listeners:
                tell(take.ticket, err)

    def _say(self, err: str | None, n: int) -> None:
        if err is not None and self._down is None:
            self.problem(f"reports not stored, agents answered 503 (they keep them): {n} "
                         f"report(s): {err}")
        elif err is None and self._down is not None and n:
            self.problem("store back: reports are stored and acknowledged again")
        if err is not None or n:
            self._down = err

    def run(self, stop: threading.Event, linger_s: float = LINGER_S) -> None:
        """The writer thread: commit as soon as rows arrive (and once a second regardless),
        at most one take per ``linger_s``: a write that took longer starts the next take at
        once (its rows waited during it), a quick one lingers for the rest."""
        last = time.monotonic() - linger_s
        while not stop.is_set():
            self.wake.wait(1.0)
            if stop.is_set():
                break
            self.wake.clear()
            rest = linger_s - (time.monotonic() - last)
            if rest > 0:
                stop.wait(rest)
            last = time.monotonic()
            self._linger = max(rest, 0.0)
            try:
                self.commit()
            except Exception as exc:  # keep the writer alive; say what failed
                self.problem(f"report writer failed: {type(exc).__name__}: {exc}")
                stop.wait(0.5)
            finally:
                self._linger = 0.0

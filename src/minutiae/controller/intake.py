"""The controller's intake: each node's latest report, kept in memory and written behind to the
store once per reconcile step (thread-safe: HTTP handlers write, the loop thread reads).

Two ways in:

- a full report (:meth:`Intake.ingest`): validated by ``minutiae.controller.wire``; its
  *digest* (a hash of what the policy and the budget can see: status, checks, findings,
  domains; not the time or the agent's bookkeeping) is returned to the agent;
- an unchanged-report heartbeat (:meth:`Intake.heartbeat`): ``{"node", "digest", "agent"}``,
  sent by an agent whose verdict did not change since the report the controller acknowledged
  (node-problem-detector style: report on change, heartbeat otherwise). It only refreshes the
  node's report time. A digest that is not the node's current one (controller restarted from
  an older store, another report came between) is a :class:`~minutiae.controller.http.fastpath.
  Conflict` (HTTP 409): the agent then sends the full report. Old agents never send
  heartbeats; their full reports are accepted as before.

Acknowledged after store: every report that changes what is kept joins the next *take*
(:meth:`Intake.take_rows`, numbered: its ``ticket``); the agent is answered once the take
with that ticket is in the store (``minutiae.controller.commit``). A full report carrying
the idempotency key (``agent.id``) of the node's current report is a replay (an agent that
lost our answer, or failed over): answered with the same digest, never stored twice.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from minutiae.controller.http.fastpath import Conflict
from minutiae.controller.record import ReportRecorder
from minutiae.controller.state import Report
from minutiae.controller.wire import MAX_AGE_S, report_from_json, report_key
from minutiae.errors import DataError, MinutiaeError
from minutiae.model import Status
from minutiae.schedulers.base import validate_node

_NOT_CONTENT = frozenset({"time", "agent", "digest"})
_DIGEST_CHARS = frozenset("0123456789abcdef")


def report_digest(body: Mapping[str, Any]) -> str:
    """Hash of a report's content (everything but ``time``, ``agent`` and ``digest``), in the
    order the agent sent it: the same content always gives the same digest here, and an agent
    that reorders keys only costs a 409 and a full report, never a wrong match."""
    content = {k: v for k, v in body.items() if k not in _NOT_CONTENT}
    text = json.dumps(content, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def signature(r: Report) -> tuple[object, ...]:
    """What the policy can see of a report, minus its time."""
    return (r.status, r.unknown, tuple((f.kind, f.code, f.severity, f.action, f.component,
                                        f.pci) for f in r.findings))


@dataclass(frozen=True, slots=True)
class Batch:
    """What one step takes from the intake: a snapshot of every report and its domains, the
    nodes whose report changed since the last step, and the nodes whose latest report has
    findings or is not OK."""

    reports: Mapping[str, Report]
    domains: Mapping[str, Mapping[str, str]]
    changed: frozenset[str]
    interesting: frozenset[str]


@dataclass(frozen=True, slots=True)
class Rows:
    """One take of rows to store: full reports ``(node, received, body, domains, digest)``,
    heartbeats ``(received, node)``, the take's ticket, and whether a report in it changes
    what the policy sees of its node (``wake``)."""

    rows: tuple[tuple[str, float, str, str, str], ...]
    beats: tuple[tuple[float, str], ...]
    ticket: int
    wake: bool = False


class Counts(Protocol):
    """The controller's counters the intake updates (under its lock)."""

    reports: int
    rejected: int


class Intake:
    def __init__(self, clock_now: Callable[[], float], lock: threading.Lock, counters: Counts,
                 recorder: ReportRecorder | None = None) -> None:
        self._now = clock_now
        self._lock = lock
        self._counters = counters   # .reports / .rejected, under ``lock``
        self.recorder = recorder
        self.reports: dict[str, Report] = {}
        self.domains: dict[str, dict[str, str]] = {}
        self._domains_text: dict[str, str] = {}
        self.digests: dict[str, str] = {}
        #: the idempotency key (``agent.id``) of each node's current full report
        self.keys: dict[str, str] = {}
        #: the number of the next take of rows to store (what a new row waits for)
        self._ticket = 0
        #: the next take holds a report that changes what the policy sees (the other
        #: replicas' steps are woken when it is stored)
        self._wake = False
        # the request body of each node's latest report (with its time and digest) until the
        # next take stores it (bytes, not the parsed dict: 20,000 parsed bodies are ~10^6
        # objects for the GC)
        self._pending: dict[str, tuple[bytes, float, str]] = {}
        self._beats: dict[str, float] = {}
        self._changed: set[str] = set()
        self._interesting: set[str] = set()
        #: with a recorder: each node's last full body, recorded again for its heartbeats (the
        #: backtest must see the node alive while it sent them)
        self._bodies: dict[str, Mapping[str, Any]] = {}

    def load(self, rows: Iterable[tuple[str, float, str, str]]) -> list[str]:
        """Reports from the store (``Store.load_reports``); returns a line per unreadable one."""
        problems = []
        for node, received, raw, domains in rows:
            try:
                body = json.loads(raw)
                rep, dom = report_from_json(body, received)
            except (MinutiaeError, ValueError) as exc:
                problems.append(f"stored report of {node} unreadable, ignored: {exc}")
                continue
            rep = replace(rep, time=received)  # as dated when it arrived (age already applied)
            self._keep(rep, dom or json.loads(domains), report_digest(body))
            mine = self._pending.get(node)
            if mine is not None and mine[1] <= received:   # ours is older: not stored
                del self._pending[node]
            self._beats.pop(node, None)
            key = report_key(body)
            if key is not None:
                self.keys[node] = key
            else:
                self.keys.pop(node, None)
            if self.recorder is not None:
                self._bodies[node] = body
        return problems

    def _keep(self, rep: Report, domains: dict[str, str], digest: str) -> None:
        n = rep.node
        self.reports[n] = rep
        self.digests[n] = digest
        if (domains or n not in self.domains) and (
                self.domains.get(n) != domains or n not in self._domains_text):
            self.domains[n] = domains
            self._domains_text[n] = json.dumps(domains)
        self._changed.add(n)
        if rep.findings or rep.status is not Status.OK:
            self._interesting.add(n)
        else:
            self._interesting.discard(n)

    def ingest(self, body: Mapping[str, Any], raw: bytes | None = None
               ) -> tuple[Report, str, bool, int | None]:
        """Validate and keep one full report: (report, digest, whether what the policy sees of
        the node changed, the ticket of the take that stores it — None when there is nothing
        to store). An older report than the one kept (from an agent's outbox) is history, not
        state; a replay (the current report's idempotency key) changes nothing."""
        try:
            rep, domains = report_from_json(body, self._now())
        except MinutiaeError:
            with self._lock:
                self._counters.rejected += 1
            raise
        key = report_key(body)
        with self._lock:
            prev = self.reports.get(rep.node)
            self._counters.reports += 1
            if prev is not None and key is not None and self.keys.get(rep.node) == key:
                return prev, self.digests[rep.node], False, self._waiting(rep.node)
        digest = report_digest(body)
        with self._lock:
            prev = self.reports.get(rep.node)
            if prev is not None and prev.time > rep.time:   # stored once the newer one is
                return rep, digest, False, self._waiting(rep.node)
            self._keep(rep, domains, digest)
            if key is not None:
                self.keys[rep.node] = key
            else:
                self.keys.pop(rep.node, None)
            self._beats.pop(rep.node, None)
            self._pending[rep.node] = (raw if raw is not None else json.dumps(body).encode(),
                                       rep.time, digest)
            ticket = self._ticket
            changed = prev is None or signature(prev) != signature(rep)
            self._wake = self._wake or changed
        if self.recorder is not None:
            self._bodies[rep.node] = body
            self.recorder.record(rep, body)
        return rep, digest, changed, ticket

    def _waiting(self, node: str) -> int | None:
        """The ticket a row of ``node`` not yet stored waits for (under the lock)."""
        return self._ticket if node in self._pending or node in self._beats else None

    def heartbeat(self, body: Mapping[str, Any]) -> tuple[Report, int | None]:
        """An unchanged-report heartbeat: the node's report, re-dated, and the ticket of the
        take that stores it (None: nothing to store)."""
        node = validate_node(body.get("node"))  # type: ignore[arg-type]
        digest = body.get("digest")
        if not isinstance(digest, str) or len(digest) != 32 or not _DIGEST_CHARS.issuperset(
                digest):
            with self._lock:
                self._counters.rejected += 1
            raise DataError("digest must be 32 hex digits", f"heartbeat from {node}")
        when = self._now()
        agent = body.get("agent")
        if isinstance(agent, Mapping):
            age = agent.get("age_s")
            if isinstance(age, int | float) and not isinstance(age, bool) and age == age and \
                    age > 0:
                when -= min(float(age), MAX_AGE_S)
        with self._lock:
            prev = self.reports.get(node)
            if prev is None or self.digests.get(node) != digest:
                raise Conflict("not the digest of this node's last report the controller "
                               "has; send the full report", f"heartbeat from {node}")
            self._counters.reports += 1
            if prev.time >= when:
                return prev, self._waiting(node)
            rep = replace(prev, time=when)
            self.reports[node] = rep
            self._changed.add(node)
            if node not in self._pending:
                self._beats[node] = when
            ticket = self._ticket
            full = self._bodies.get(node)
        if self.recorder is not None and full is not None:
            self.recorder.record(rep, full)
        return rep, ticket

    def shift(self, delta: float) -> None:
        """The wall clock jumped by ``delta``: every kept time moves with it (ages stay)."""
        with self._lock:
            self.reports = {n: replace(r, time=r.time + delta) for n, r in self.reports.items()}
            self._pending = {n: (raw, t + delta, d) for n, (raw, t, d) in self._pending.items()}
            self._beats = {n: t + delta for n, t in self._beats.items()}
            self._changed.update(self.reports)

    def redate(self, node: str, received: float) -> bool:
        """Another replica stored a heartbeat for ``node`` whose report we hold: re-date it
        (False when we do not hold it or hold a newer one). Under the caller's lock."""
        prev = self.reports.get(node)
        if prev is None or prev.time >= received:
            return False
        self.reports[node] = replace(prev, time=received)
        self._changed.add(node)
        return True

    def take(self) -> Batch:
        """Everything the step needs (rows to store are taken by :meth:`take_rows`)."""
        with self._lock:
            changed, self._changed = self._changed, set()
            reports = dict(self.reports)
            domains = dict(self.domains)
            interesting = frozenset(self._interesting)
        return Batch(reports, domains, frozenset(changed), interesting)

    def take_rows(self) -> Rows:
        """The rows to store, handed over with the take's ticket (call :meth:`give_back`
        when they could not be saved); the next rows wait for the next ticket."""
        with self._lock:
            pending, self._pending = self._pending, {}
            beats, self._beats = self._beats, {}
            texts = {n: self._domains_text.get(n, "{}") for n in pending}
            ticket = self._ticket
            self._ticket += 1
            wake, self._wake = self._wake, False
        rows = tuple((n, t, _text(raw), texts[n], d) for n, (raw, t, d) in pending.items())
        return Rows(rows, tuple((t, n) for n, t in beats.items()), ticket, wake)

    def give_back(self, rows: Rows) -> None:
        """Rows that could not be saved wait for the next take (unless newer ones came)."""
        with self._lock:
            for n, t, text, _dom, digest in rows.rows:
                self._pending.setdefault(n, (text.encode(), t, digest))
            for t, n in rows.beats:
                if n not in self._pending:
                    self._beats.setdefault(n, t)
            self._wake = self._wake or rows.wake


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # JSON in UTF-16/32 (json.loads accepts it): store as UTF-8
        return json.dumps(json.loads(raw))

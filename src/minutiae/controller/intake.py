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
from minutiae.controller.wire import MAX_AGE_S, report_from_json
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
    nodes whose report changed since the last step, the rows to write behind (full reports:
    ``(node, received, body, domains)``; heartbeats: ``(received, node)``), and the nodes whose
    latest report has findings or is not OK."""

    reports: Mapping[str, Report]
    domains: Mapping[str, Mapping[str, str]]
    changed: frozenset[str]
    rows: tuple[tuple[str, float, str, str], ...]
    beats: tuple[tuple[float, str], ...]
    interesting: frozenset[str]


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
        # the request body of each node's latest report until the next step writes it behind
        # (bytes, not the parsed dict: 20,000 parsed bodies are ~10^6 objects for the GC)
        self._pending: dict[str, bytes] = {}
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
               ) -> tuple[Report, str, bool]:
        """Validate and keep one full report: (report, digest, whether what the policy sees of
        the node changed). An older report than the one kept (from an agent's outbox) is
        history, not state."""
        try:
            rep, domains = report_from_json(body, self._now())
        except MinutiaeError:
            with self._lock:
                self._counters.rejected += 1
            raise
        digest = report_digest(body)
        with self._lock:
            prev = self.reports.get(rep.node)
            self._counters.reports += 1
            if prev is not None and prev.time > rep.time:
                return rep, digest, False
            self._keep(rep, domains, digest)
            self._beats.pop(rep.node, None)
            self._pending[rep.node] = raw if raw is not None else json.dumps(body).encode()
        if self.recorder is not None:
            self._bodies[rep.node] = body
            self.recorder.record(rep, body)
        return rep, digest, prev is None or signature(prev) != signature(rep)

    def heartbeat(self, body: Mapping[str, Any]) -> Report:
        """An unchanged-report heartbeat: the node's report, re-dated."""
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
                return prev
            rep = replace(prev, time=when)
            self.reports[node] = rep
            self._changed.add(node)
            if node not in self._pending:
                self._beats[node] = when
            full = self._bodies.get(node)
        if self.recorder is not None and full is not None:
            self.recorder.record(rep, full)
        return rep

    def take(self) -> Batch:
        """Everything the step needs, and the write-behind rows (handed over: call
        :meth:`give_back` when they could not be saved)."""
        with self._lock:
            pending, self._pending = self._pending, {}
            beats, self._beats = self._beats, {}
            changed, self._changed = self._changed, set()
            reports = dict(self.reports)
            domains = dict(self.domains)
            texts = {n: self._domains_text.get(n, "{}") for n in pending}
            interesting = frozenset(self._interesting)
        rows = tuple((n, reports[n].time, _text(raw), texts[n]) for n, raw in pending.items())
        return Batch(reports, domains, frozenset(changed), rows,
                     tuple((t, n) for n, t in beats.items()), interesting)

    def give_back(self, batch: Batch) -> None:
        """Rows that could not be saved wait for the next step (unless newer ones came)."""
        with self._lock:
            for n, _t, text, _d in batch.rows:
                self._pending.setdefault(n, text.encode())
            for t, n in batch.beats:
                if n not in self._pending:
                    self._beats.setdefault(n, t)


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # JSON in UTF-16/32 (json.loads accepts it): store as UTF-8
        return json.dumps(json.loads(raw))

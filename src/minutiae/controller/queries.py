"""What the API reads from a running :class:`~minutiae.controller.service.Controller`: the node
rows (``nodes``), ``status`` and ``explain``. Views tell the truth: ``sched`` is always the
scheduler's word; in dry-run what minutiae *would* have done is ``would`` beside it; ``owner``
says which minutiae path (this controller, the HealthCheckProgram ``hcp``, another controller,
an older version's ``legacy``) made a drain, None for an admin's or another tool's.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from minutiae.controller.reconcile import assess
from minutiae.controller.state import ControllerMemory, Health, Report
from minutiae.controller.views import count_rows, explain_view, status_view, tally
from minutiae.errors import BackendError, MinutiaeError

if TYPE_CHECKING:
    from minutiae.controller.service import Controller


def node_rows(ctl: Controller) -> list[dict[str, Any]]:
    """Every fleet node: those that report, and those the scheduler knows that never did
    (``silent``: no report, or a stale one)."""
    now = ctl.clock.now()
    with ctl._lock:
        reports = dict(ctl._reports)
        domains = dict(ctl.intake.domains)
    mem = ctl.memory
    return [_row(ctl, n, reports.get(n), domains.get(n, {}), now, mem)
            for n in sorted(reports.keys() | ctl._known)]


def node_row(ctl: Controller, node: str) -> dict[str, Any] | None:
    """``node``'s row of :func:`node_rows` alone (None: not in the fleet), without building
    every other node's (``explain`` and the web UI's actions at 20,000 nodes)."""
    with ctl._lock:
        rep = ctl._reports.get(node)
        dom = ctl.intake.domains.get(node, {})
    if rep is None and node not in ctl._known:
        return None
    return _row(ctl, node, rep, dom, ctl.clock.now(), ctl.memory)


class RowCache:
    """:func:`node_rows` kept between calls (the web UI's snapshot): a node's row is made again
    only when what it is made of changed — its report (a heartbeat re-dates it: a new report),
    domains, memory, scheduler state, dry-run overlay, or whether the report went stale; the
    policy or dry-run switched remakes them all. A kept row's ``report_age_s`` is the age when
    it was made. ``refresh`` returns the same list while no row changed, so what was rendered
    from it stays valid; ``made``: rows made by the last refresh (what a refresh cost)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[dict[str, Any]] = []
        #: the rows' counts for ``status`` (``views.count_rows``), kept as rows change
        self.counted: Counter[str] = Counter()
        self.made = 0
        self._at: dict[str, int] = {}                  # node -> index in rows
        self._keys: dict[str, tuple[object, ...]] = {}
        self._names: set[str] = set()
        self._of: tuple[object, ...] = ()

    def refresh(self, ctl: Controller, nodes: Collection[str] | None = None
                ) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """Every node's row up to date, and their counts; ``nodes``: only these may have
        changed (after an action on them: no other row is looked at). A node new to the fleet
        remakes the list."""
        with self.lock:
            self.made = 0
            got = None if nodes is None else self._part(ctl, nodes)
            names, reports = got or self._whole(ctl)
            now, mem = ctl.clock.now(), ctl.memory
            with ctl._lock:
                doms = {n: ctl.intake.domains.get(n) or {} for n in names}
            rows = None
            for n in names:
                r = reports.get(n)
                k = (r, doms[n], mem.nodes.get(n), ctl._sched.get(n, (None,))[0],
                     ctl._overlay.get(n) if ctl.dry_run else None,
                     r is None or now - r.time > ctl.policy.stale_after_s)
                if self._keys.get(n) != k:
                    rows = list(self.rows) if rows is None else rows
                    i = self._at[n]
                    if n in self._keys:
                        self.counted.subtract(tally(rows[i]))
                    rows[i] = _row(ctl, n, r, doms[n], now, mem)
                    self.counted.update(tally(rows[i]))
                    self._keys[n] = k
                    self.made += 1
            if rows is not None:
                self.rows = rows
            return self.rows, dict(+self.counted)   # without the zeros

    def _part(self, ctl: Controller, nodes: Collection[str]
              ) -> tuple[set[str], dict[str, Report]] | None:
        """``nodes`` of the fleet and their reports; None when one is new (or the policy
        changed): the whole fleet then."""
        with ctl._lock:
            reports = {n: r for n in nodes if (r := ctl._reports.get(n)) is not None}
        names = {n for n in nodes if n in reports or n in ctl._known}
        if not names <= self._names or (ctl.policy, ctl.dry_run) != self._of:
            return None
        return names, reports

    def _whole(self, ctl: Controller) -> tuple[set[str], dict[str, Report]]:
        with ctl._lock:
            reports = dict(ctl._reports)
        names = reports.keys() | ctl._known
        if names != self._names or (ctl.policy, ctl.dry_run) != self._of:
            self._of, self._names, self._keys = (ctl.policy, ctl.dry_run), names, {}
            self.counted = Counter()
            order = sorted(names)
            self._at = {n: i for i, n in enumerate(order)}
            self.rows = [{"node": n} for n in order]   # every row made below
        return names, reports


def _row(ctl: Controller, n: str, r: Report | None, domains: dict[str, str],
         now: float, mem: ControllerMemory) -> dict[str, Any]:
    m = mem.nodes.get(n)
    a = assess(r, ctl.policy, now, m.acked if m else frozenset())
    st = ctl._sched.get(n, (None, 0.0))[0]
    would = ctl._overlay.get(n) if ctl.dry_run else None
    age = round(now - r.time, 3) if r is not None else None
    return {
        "node": n, "health": a.health.value, "status": r.status.label if r else None,
        "report_age_s": age, "findings": len(r.findings) if r else 0,
        "silent": age is None or age > ctl.policy.stale_after_s,
        "sched": st.state.value if st else None, "reason": st.reason if st else None,
        "ours": bool(st and st.ours), "owner": st.owner if st else None,
        "would": ("drained: " + (would.reason or "")) if would is not None else None,
        "step": m.step.label if m and m.step else None,
        "lemon": bool(m and m.lemon), "domains": domains,
        "acknowledged": len(m.acked) if m else 0,
        "rule": a.rule or None, "why": None if a.health is not Health.UNKNOWN
        else "; ".join(a.evidence)}


def status(ctl: Controller, rows: list[dict[str, Any]] | None = None,
           counted: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The fleet summary; ``rows``: :func:`node_rows` already built and ``counted``, their
    :func:`~minutiae.controller.views.count_rows` (the web UI's snapshot keeps both)."""
    rows = node_rows(ctl) if rows is None else rows
    counted = count_rows(rows) if counted is None else counted
    with ctl._lock:
        c = ctl.counters
        problems = [{"time": t, "what": w} for t, w in list(c.problems)[-20:]]
        counts = {"reports": c.reports, "rejected": c.rejected, "steps": c.steps,
                  "actions_done": c.actions_done, "actions_failed": c.actions_failed,
                  "holds": c.holds, "scheduler_up": c.sched_up,
                  "last_step_ms": round(1e3 * c.step_s[-1], 1) if c.step_s else None,
                  "max_step_ms": round(1e3 * max(c.step_s), 1) if c.step_s else None,
                  # acknowledge after store: reports stored, in how many transactions
                  "reports_stored": ctl.committer.rows,
                  "store_writes": ctl.committer.writes,
                  "store_write_s": round(ctl.committer.write_s, 6),
                  "store_write_cpu_s": round(ctl.committer.write_cpu_s, 6)}
    out = status_view(counted, len(rows), dry_run=ctl.dry_run, scheduler=ctl.backend.name,
                      policy=ctl.policy.source, pause=ctl.memory.pause,
                      pending=len(ctl.store.pending()), last_step=ctl.last_step,
                      counts=counts, problems=problems)
    out["identity"] = ctl.owner
    # dry-run: what minutiae would have drained, beside the scheduler's own word above
    out["would_be_drained"] = counted.get("would_be_drained", 0)
    # where a report's latency goes since the last status read (issue 17)
    out["latency"] = ctl.committer.parts.take()
    out["retrying"] = ctl.retries.to_json()
    out.update(ctl.leadership.status().to_json())
    return out


def explain(ctl: Controller, node: str) -> dict[str, Any]:
    try:  # the scheduler's word, live, for the one node asked about
        st = ctl.backend.state(node)
        ctl._sched[node] = (st, ctl._sched.get(node, (None, float("-inf")))[1])
    except MinutiaeError as exc:
        ctl.problem(f"explain {node}: scheduler state unknown: {exc}")
    one = node_row(ctl, node)
    history = [r.to_json() for r in ctl.store.audit(node=node, limit=20)]
    if one is None and not history:
        raise BackendError(f"unknown node {node}: no report and no decision recorded")
    with ctl._lock:
        rep = ctl._reports.get(node)
    m = ctl.memory.nodes.get(node)
    row = {**(one or {"node": node}), "scheduler": ctl.scheduler}
    return explain_view(node, row, history,
                        assess(rep, ctl.policy, ctl.clock.now(), m.acked if m else frozenset()),
                        me=ctl.owner)

"""The controller service: ingest reports, run the reconcile step, execute the plan through a
scheduler backend with the audit log written first, recover pending actions on start.

Thread model: HTTP handlers call :meth:`Controller.ingest` (in memory, fast); one loop thread
calls :meth:`Controller.step` every ``interval`` seconds or as soon as a report changes a node's
health. Reports are stored in group commits before they are acknowledged
(``minutiae.controller.commit``: a writer thread, and each step), so an acknowledged report
survives a crash.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from minutiae.clock import Clock
from minutiae.controller import clockjump, queries, retry
from minutiae.controller.commit import Committer
from minutiae.controller.ha.replicas import fenced_batch, pull_reports
from minutiae.controller.intake import Intake
from minutiae.controller.leadership import Leadership, SoleActor
from minutiae.controller.notify.base import Notifier
from minutiae.controller.policy import Policy
from minutiae.controller.reconcile import reconcile, with_pause
from minutiae.controller.record import ReportRecorder
from minutiae.controller.sched_read import read_states, read_tolerances
from minutiae.controller.state import (
    ControllerMemory,
    Decision,
    FleetState,
    NodeView,
    Pause,
    Plan,
    Report,
    Verb,
)
from minutiae.controller.store import DONE, DRY_RUN, FAILED, AuditRow, ControllerStore
from minutiae.errors import MinutiaeError
from minutiae.schedulers.base import (
    DEFAULT_OWNER,
    LEGACY_OWNER,
    Capabilities,
    NodeSchedState,
    NodeState,
    SchedulerBackend,
)

REMEDIATION_KEY = "remediation"
_BUSY = (NodeSchedState.DRAINED, NodeSchedState.DRAINING)


@dataclass
class Counters:
    reports: int = 0
    rejected: int = 0
    steps: int = 0
    actions_done: int = 0
    actions_failed: int = 0
    holds: int = 0
    sched_up: bool | None = None  # did the scheduler answer the last read (None: not asked)
    problems: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=50))
    #: how long the last 100 reconcile steps took (seconds, the clock's monotonic time)
    step_s: deque[float] = field(default_factory=lambda: deque(maxlen=100))


class Controller:
    def __init__(self, store: ControllerStore, backend: SchedulerBackend, policy: Policy, clock: Clock,
                 *, dry_run: bool | None = None, notifiers: Sequence[Notifier] = (),
                 sched_ttl_s: float = 30.0, recorder: ReportRecorder | None = None,
                 owner: str | None = None, leadership: Leadership | None = None) -> None:
        self.store = store
        #: this controller's identity (``cluster/controller``), written into its drains
        self.owner = owner or str(getattr(backend, "owner", DEFAULT_OWNER))
        #: asked before acting: a standby ingests and serves reads, never acts
        self.leadership: Leadership = leadership or SoleActor(self.owner, clock)
        self._leading: bool | None = None
        #: failed resumes/escalations, retried with backoff (``controller/retry.py``)
        self.retries = retry.Retries()
        self.on_problem: list[Callable[[str], None]] = []
        self._cursor = 0  # of reports other replicas stored (store.reports_since)
        self.backend = backend
        #: the backend's optional capabilities (bulk states, listing, job tolerances), found once
        self.caps = Capabilities.of(backend)
        self.policy = policy
        self.clock = clock
        self.dry_run = policy.dry_run if dry_run is None else dry_run
        self.notifiers = list(notifiers)
        self.sched_ttl_s = sched_ttl_s
        self.recorder = recorder  # reports.jsonl for `minutiae backtest` (MINUTIAE_RECORD)
        self.counters = Counters()
        self.wake = threading.Event()
        self._lock = threading.Lock()        # reports and counters
        self._mem_lock = threading.RLock()   # memory (step vs pause/unpause)
        self._jumps = clockjump.WallJumps(clock)   # reports are dated by ``wall_now``
        self.intake = Intake(self.wall_now, self._lock, self.counters, recorder)
        #: stores the intake's rows (group commits) before reports are acknowledged
        self.committer = Committer(self.intake, store, self.problem)
        self._views: dict[str, NodeView] = {}
        self._sched: dict[str, tuple[NodeState | None, float]] = {}
        self._all_at = float("-inf")     # last time every node's scheduler state was read
        self._touched: set[str] = set()  # acted on: re-read at the next step
        #: fleet nodes the scheduler knows (``all_states``), reported or not
        self._known: set[str] = set()
        self.last_step: float | None = None
        for line in self.intake.load(store.load_reports()):
            self.problem(line)
        self.memory: ControllerMemory = store.load_memory()
        #: job → nodes it survives losing, set through the API (else the policy's default)
        self._tolerance: dict[str, int] = store.tolerances()
        #: job → tolerance the scheduler's job metadata gives (the API's value wins)
        self._sched_tolerance: dict[str, int] = {}
        self._overlay: dict[str, NodeState] = {
            n: NodeState(n, NodeSchedState.DRAINED, reason=r, ours=True)
            for n, r in (store.get_kv("dry_overlay") or {}).items()}

    @property
    def scheduler(self) -> str:
        return "dry-run" if self.dry_run else self.backend.name

    def problem(self, text: str) -> None:
        """Say what we could not do (kept for ``minutiae status``)."""
        with self._lock:
            self.counters.problems.append((self.clock.now(), text))
        for hook in self.on_problem:  # structured logs (controller/decisionlog.py)
            hook(text)

    # ---- ingest --------------------------------------------------------------------------
    def ingest(self, body: Mapping[str, Any], raw: bytes | None = None) -> Report:
        """Validate and keep one agent report; wakes the loop only when the report changes
        what the node looks like to the policy (status or findings), so a fleet of steadily
        warning nodes does not keep the loop busy. ``raw`` (the request body) is stored as is."""
        return self.ingest_digest(body, raw)[0]

    def ingest_digest(self, body: Mapping[str, Any], raw: bytes | None = None
                      ) -> tuple[Report, str | None, int | None]:
        """:meth:`ingest` for the API: a heartbeat (``digest`` and no ``status``) re-dates the
        node's report (see ``minutiae.controller.intake``); returns the report, the digest
        the agent may send next time and the ticket of the take that stores it (None: nothing
        to store) — the API answers once that take is stored."""
        if isinstance(body, Mapping) and "digest" in body and "status" not in body \
                and "checks" not in body:
            rep, ticket = self.intake.heartbeat(body)
            digest: str | None = str(body["digest"])
        else:
            rep, digest, changed, ticket = self.intake.ingest(body, raw)
            if changed and not self.wake.is_set():
                self.wake.set()
        # set only when clear: the writer clears it before its take, which has our row then
        if ticket is not None and not self.committer.wake.is_set():
            self.committer.wake.set()
        return rep, digest, ticket

    def wall_now(self) -> float:
        """The wall clock; a jump seen here re-dates the kept reports at once."""
        now, jump = self._jumps.now()
        if jump:
            self.intake.shift(jump)
        return now

    @property
    def _reports(self) -> dict[str, Report]:
        return self.intake.reports

    # ---- scheduler states ----------------------------------------------------------------
    def _states(self, nodes: Collection[str], interesting: set[str], now: float,
                everything: bool = False) -> dict[str, NodeState | None]:
        """Scheduler states of ``nodes`` (read with the backend's bulk ``states(nodes)`` when
        it has one) → state, or None for an interesting node whose state could not be read
        (reconcile never acts on it; others keep their cached state). ``everything``: also
        every fleet node the scheduler knows (``all_states``), reported or not."""
        got = read_states(self.backend, self.caps, list(nodes), everything=everything,
                          in_fleet=self.policy.in_fleet, problem=self.problem)
        if got.unreachable is not None:
            self.counters.sched_up = not got.unreachable
        if got.known is not None:
            self._known = set(got.known)
        need, failed = sorted(got.states.keys() | got.failed), got.failed
        for n, st in got.states.items():
            self._sched[n] = (self._adopt(st) if st is not None else None, now)
        out: dict[str, NodeState | None] = {}
        for n in need:
            cached = self._sched.get(n)
            st = None if (n in failed and n in interesting) or cached is None else cached[0]
            if self.dry_run and n in self._overlay and st is not None and (
                    st.state is NodeSchedState.AVAILABLE or st.ours):
                st = replace(self._overlay[n], jobs=st.jobs)
            out[n] = st
        return out

    def _adopt(self, st: NodeState) -> NodeState:
        """A plain ``minutiae:`` (legacy) drain is ours only when our memory says we made it."""
        if st.owner == LEGACY_OWNER and st.ours:
            m = self.memory.nodes.get(st.node)
            if m is None or m.drained_at is None:
                return replace(st, ours=False)
        return st

    # ---- one step ------------------------------------------------------------------------
    def step(self) -> Plan:
        """Flush reports, reconcile, audit, act, notify. Never raises for a scheduler problem.

        Cost grows with what changed, not with the fleet: views are rebuilt for nodes whose
        report changed or whose scheduler state was re-read; scheduler states are re-read
        every step for interesting nodes (findings, not OK, remembered, just acted on) and for
        every node once per ``sched_ttl_s``."""
        t0 = self.clock.monotonic()
        leading = self._lead()
        now = self.wall_now()
        if jump := self._jumps.take():   # controller/clockjump.py: act on nothing
            clockjump.handle_jump(self, jump, now, leading)
            leading = False
        if leading:
            self.retry_pending()
            retry.retry_due(self, now)
        self._cursor = pull_reports(self.store, self.intake, self._lock, self._cursor,
                                    self.problem)  # what the other replicas took
        self.committer.commit()   # rows the writer thread has not stored yet (none without it)
        batch = self.intake.take()
        reports = batch.reports
        if not leading:  # a standby keeps reports, never reconciles or acts
            self.last_step = now
            return Plan((), self.memory, (), self.dry_run)
        with self._mem_lock:
            mem = self.memory
            interesting = set(batch.interesting) | set(mem.nodes)
            full = now - self._all_at >= self.sched_ttl_s
            if full:
                want: Collection[str] = sorted(reports)
                self._all_at = now
            else:
                touched, self._touched = self._touched, set()
                want = sorted(n for n in interesting | touched | {
                    n for n in batch.changed if n not in self._sched}
                    if n in reports or n in self._known)
            states = self._states(want, interesting, now, everything=full)
            if full and (tol := read_tolerances(self.caps, self.problem)) is not None:
                self._sched_tolerance = tol
            views = self._views
            if full:  # nodes gone from the scheduler that never reported leave the fleet
                for n in [n for n in views if n not in reports and n not in self._known]:
                    del views[n]
            for n in batch.changed | states.keys():  # rebuild only the views that changed
                v = views.get(n)
                st = states.get(n, v.sched if v is not None else None)
                views[n] = NodeView(n, reports.get(n), st, batch.domains.get(n, {}))
            plan = reconcile(FleetState(dict(views), mem, self.scheduler, job_tolerance={
                **self._sched_tolerance, **self._tolerance}, owner=self.owner), self.policy, now)
            ids = fenced_batch(self.store, self.leadership, plan, mem, self.dry_run, self.problem)
            if ids is None:  # deposed: the audit insert failed on the epoch, nothing is done
                self.last_step = now
                return Plan((), mem, (), self.dry_run)
            self.memory = plan.memory
        acting = [d for d in plan.decisions if d.action is not Verb.HOLD]
        for d, audit_id in zip(acting, ids, strict=True):
            self._execute(d, audit_id, views[d.node].sched)
        if self.dry_run and acting:
            self.store.set_kv("dry_overlay", {n: s.reason for n, s in self._overlay.items()})
        with self._lock:
            self.counters.steps += 1
            self.counters.holds += sum(1 for d in plan.decisions if d.action is Verb.HOLD and d.new)
        self._tell(plan)
        self.last_step = now
        with self._lock:
            self.counters.step_s.append(self.clock.monotonic() - t0)
        return plan

    def _tell(self, plan: Plan) -> None:
        for a in plan.alerts:
            self.problem(a)
        tell = [d for d in plan.decisions if d.new]
        if tell or plan.alerts:
            for nt in self.notifiers:
                try:
                    nt.notify(tell, plan.alerts)
                except Exception as exc:  # a notifier must never stop remediation
                    self.problem(f"notifier {type(nt).__name__} failed: {exc}")

    def _lead(self) -> bool:
        """Ask the leadership; a change of role is said once (status and problems)."""
        try:
            leading = self.leadership.acquire() and self.leadership.fence() is not None
        except MinutiaeError as exc:
            leading = False
            self.problem(f"leadership unknown, not acting: {exc}")
        if leading and not self._leading and self._leading is not None:
            # taking over from another replica: its memory, pause and breaker are the store's
            with self._mem_lock:
                self.memory = self.store.load_memory()
                self._tolerance = self.store.tolerances()
        if leading != self._leading and not leading:
            self.problem(f"standby: not acting ({self.leadership.status().detail or 'no lead'})")
        self._leading = leading
        return leading

    def resolve(self, node: str, reason: str, *, now: bool = False,
                by: str = "api") -> dict[str, Any]:
        """A human returns ``node`` to service (``controller/resolve.py``)."""
        from minutiae.controller.resolve import resolve

        return resolve(self, node, reason, at_once=now, by=by)

    def _execute(self, d: Decision, audit_id: int, sched: NodeState | None) -> None:
        self._touched.add(d.node)
        if self.dry_run:
            jobs = sched.jobs if sched else ()
            if d.action is Verb.DRAIN:
                self._overlay[d.node] = NodeState(d.node, NodeSchedState.DRAINED, d.reason, True,
                                                  jobs)
            elif d.action is Verb.RESUME:
                self._overlay.pop(d.node, None)
            self.store.finish(audit_id, DRY_RUN, "dry-run: the scheduler was not touched",
                              self.clock.now())
            return
        if self.leadership.fence() is None:  # deposed since the batch: the next leader does it
            self.problem(f"{d.action.value} {d.node} (audit {audit_id}) left pending: not the "
                         "leader any more")
            return
        try:
            self._apply(d.action.value, d.node, d.reason, d.step.label if d.step else None)
        except MinutiaeError as exc:
            self.store.finish(audit_id, FAILED, str(exc), self.clock.now())
            with self._lock:
                self.counters.actions_failed += 1
            self.problem(f"{d.action.value} {d.node} failed: {exc}")
            self.retries.add(d, audit_id, str(exc), self.clock.now())
            self._sched.pop(d.node, None)
            return
        # what the scheduler should now say (re-read at the next step: stamped as stale)
        jobs = sched.jobs if sched else ()
        if d.action is Verb.DRAIN:
            self._sched[d.node] = (NodeState(d.node, NodeSchedState.DRAINED, d.reason, True,
                                             jobs), float("-inf"))
        elif d.action is Verb.RESUME:
            self._sched[d.node] = (NodeState(d.node, NodeSchedState.AVAILABLE, jobs=jobs),
                                   float("-inf"))
        self.store.finish(audit_id, DONE, None, self.clock.now())
        with self._lock:
            self.counters.actions_done += 1

    def _apply(self, action: str, node: str, reason: str | None, step: str | None) -> None:
        if action == Verb.DRAIN.value:
            self.backend.drain(node, reason or "minutiae: drain")
        elif action == Verb.RESUME.value:
            self.backend.resume(node)
        elif action == Verb.ESCALATE.value:
            self.backend.annotate(node, REMEDIATION_KEY, step or "inspect")

    # ---- recovery and retries (controller/retry.py) ------------------------------------
    def retry_pending(self) -> list[AuditRow]:
        """Finish every ``pending`` audit row left by a crash mid-batch."""
        return retry.retry_pending(self)

    # ---- pause ---------------------------------------------------------------------------
    def pause(self, reason: str) -> None:
        with self._mem_lock:
            now = self.clock.now()
            self.memory = with_pause(self.memory, Pause(reason, now, "human"), now)
            self.store.save_pause(self.memory.pause, self.memory.breaker_since)

    def unpause(self) -> None:
        with self._mem_lock:
            self.memory = with_pause(self.memory, None, self.clock.now())
            self.store.save_pause(None, self.memory.breaker_since)
        self.wake.set()

    # ---- per-job tolerance ---------------------------------------------------------------
    def set_tolerance(self, job: str, nodes: int | None) -> None:
        """``job`` survives losing ``nodes`` nodes (None: the policy's default applies)."""
        with self._mem_lock:
            self.store.set_tolerance(job, nodes, self.clock.now())
            if nodes is None:
                self._tolerance.pop(job, None)
            else:
                self._tolerance[job] = nodes
            # holds by the job check are decided afresh (and audited with the new numbers)
            mem = self.memory
            self.memory = replace(mem, nodes={
                n: replace(m, last_hold=None) if m.last_hold == "job" else m
                for n, m in mem.nodes.items()})
        self.wake.set()

    def tolerances(self) -> dict[str, int]:
        with self._mem_lock:
            return dict(self._tolerance)

    def scheduler_tolerances(self) -> dict[str, int]:
        return dict(self._sched_tolerance)

    # ---- views for the API (controller/queries.py) -----------------------------------------
    def node_rows(self) -> list[dict[str, Any]]:
        return queries.node_rows(self)

    def status(self) -> dict[str, Any]:
        return queries.status(self)

    def explain(self, node: str) -> dict[str, Any]:
        return queries.explain(self, node)

"""What the API reads from a running :class:`~minutiae.controller.service.Controller`: the node
rows (``nodes``), ``status`` and ``explain``. Views tell the truth: ``sched`` is always the
scheduler's word; in dry-run what minutiae *would* have done is ``would`` beside it; ``owner``
says which minutiae path (this controller, the HealthCheckProgram ``hcp``, another controller,
an older version's ``legacy``) made a drain, None for an admin's or another tool's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minutiae.controller.reconcile import assess
from minutiae.controller.state import ControllerMemory, Health, Report
from minutiae.controller.views import explain_view, status_view
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


def status(ctl: Controller, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The fleet summary; ``rows``: :func:`node_rows` already built (the web UI's snapshot)."""
    rows = node_rows(ctl) if rows is None else rows
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
    out = status_view(rows, dry_run=ctl.dry_run, scheduler=ctl.backend.name,
                      policy=ctl.policy.source, pause=ctl.memory.pause,
                      pending=len(ctl.store.pending()), last_step=ctl.last_step,
                      counts=counts, problems=problems)
    out["identity"] = ctl.owner
    # dry-run: what minutiae would have drained, beside the scheduler's own word above
    out["would_be_drained"] = sum(1 for r in rows if r.get("would"))
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

"""``minutiae resolve NODE --reason … [--now]`` (and ``POST /v1/nodes/{node}/resolve``): a human
returns a node to service.

The node's current findings are acknowledged (their fingerprints go into its memory: that
evidence can no longer drain it; a new occurrence is new evidence and can). A node we drained
is then resumed through the policy's healthy delay, or at once with ``--now`` (through the
backend: on Kubernetes the taint and ownership annotations go too). Audited: a ``resolve`` row
(who, why, what was acknowledged) and, with ``--now``, the ``resume`` row. A standby refuses:
only the leader acts. A drain that is not ours (an admin's, the HealthCheckProgram's) is
acknowledged but never resumed here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from minutiae.controller.budget import BudgetVerdict
from minutiae.controller.evidence import acknowledge
from minutiae.controller.state import EMPTY_MEMORY, Decision, NodeView, Verb, undo_command
from minutiae.errors import BackendError, MinutiaeError, ValidationError
from minutiae.schedulers.base import NodeState, validate_node

if TYPE_CHECKING:
    from minutiae.controller.service import Controller

MAX_REASON = 300


def sched_now(ctl: Controller, node: str) -> NodeState | None:
    """The scheduler's word on ``node`` now (the cached one if it cannot be read; dry-run: what
    minutiae would have made it)."""
    st: NodeState | None
    try:
        st = ctl._adopt(ctl.backend.state(node))
        ctl._sched[node] = (st, ctl.clock.now())
    except MinutiaeError as exc:
        ctl.problem(f"resolve {node}: scheduler state unknown: {exc}")
        cached = ctl._sched.get(node)
        st = cached[0] if cached else None
    if ctl.dry_run and node in ctl._overlay:
        st = ctl._overlay[node]
    return st


def human_request(ctl: Controller, verb: str, node: str, reason: str, need: str) -> str:
    """A human's ``verb`` on ``node`` (resolve, a drain from the web UI): its reason cleaned;
    a bad node name, a missing (``need`` says what) or too long reason, or a standby refused."""
    validate_node(node)
    why = " ".join(str(reason).split())
    if not why:
        raise ValidationError(f"{verb}: {need}")
    if len(why) > MAX_REASON:
        raise ValidationError(f"{verb}: reason over {MAX_REASON} characters")
    if ctl.leadership.fence() is None:
        st = ctl.leadership.status()
        raise BackendError(f"standby: {verb} on the leader ({st.leader or 'unknown'})")
    return why


def resolve(ctl: Controller, node: str, reason: str, *, at_once: bool = False,
            by: str = "api") -> dict[str, Any]:
    """Acknowledge ``node``'s current findings and return it to service (see the module)."""
    why = human_request(ctl, "resolve", node, reason,
                        "--reason is required (what was done to the node)")
    with ctl._lock:
        rep = ctl._reports.get(node)
    sched = sched_now(ctl, node)
    if rep is None and sched is None and not ctl.store.audit(node=node, limit=1):
        raise BackendError(f"unknown node {node}: no report and no decision recorded")
    now = ctl.clock.now()
    with ctl._mem_lock:
        before = ctl.memory
        m, lines = acknowledge(before.nodes.get(node, EMPTY_MEMORY), rep)
        m = replace(m, unhealthy_since=None, last_hold=None, lemon=False, held=None)
        ours = NodeView(node, rep, sched).ours
        human = BudgetVerdict(True, "human", f"resolved by {by}: {why}")
        decisions = [Decision(node, Verb.RESOLVE, "resolve", (
            f"resolved by {by}: {why}", *(f"acknowledged: {ln}" for ln in lines)), human,
            undo_command(ctl.scheduler, Verb.RESOLVE, node), now)]
        if ours and at_once:
            m = replace(m, healthy_since=None, drained_at=None, step=None, step_since=None,
                        seen_drained=False)
            decisions.append(Decision(node, Verb.RESUME, "resolve", (f"resolve --now: {why}",),
                                      human, undo_command(ctl.scheduler, Verb.RESUME, node,
                                                          sched.reason or "" if sched else ""),
                                      now))
        elif ours:
            m = replace(m, healthy_since=now)
        mem = replace(before, nodes={**before.nodes, node: m})
        ids = ctl.store.begin_batch(mem, before, decisions, ctl.dry_run)
        ctl.memory = mem
    for d, audit_id in zip(decisions, ids, strict=True):
        ctl._execute(d, audit_id, sched)
    ctl.wake.set()
    resumed = "now" if ours and at_once else ("after the healthy delay" if ours else None)
    return {"node": node, "acknowledged": list(lines), "resumed": resumed,
            "audit": ids, "dry_run": ctl.dry_run,
            "note": None if ours or sched is None or sched.owner is None and not sched.reason
            else f"not our drain (reason {sched.reason!r}): acknowledged, not resumed"}

"""A human drains a node through minutiae (the web UI's *drain*, the *undo* of a resume).

The drain goes through the backend like the controller's own (same owner tag, so the audit, the
budget's count and ``explain`` all see it) and is audited first with who and why. The node's
memory is marked ``held``: the controller never resumes it after the healthy delay (it HOLDs,
said once); only ``minutiae resolve`` (or an admin's resume in the scheduler, honoured as a
resolve) returns it. A human's drain is not checked against the safety budget (a human decided),
but it counts against it for the controller's own drains. A standby refuses (only the leader
acts), and so does a node already drained or down by someone else.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from minutiae.controller.budget import BudgetVerdict
from minutiae.controller.resolve import human_request, sched_now
from minutiae.controller.state import EMPTY_MEMORY, Decision, Verb, undo_command
from minutiae.errors import BackendError
from minutiae.schedulers.base import NodeSchedState, make_reason

if TYPE_CHECKING:
    from minutiae.controller.service import Controller


def drain(ctl: Controller, node: str, reason: str, *, by: str) -> dict[str, Any]:
    """Drain ``node`` for a human (``by``: who, e.g. ``web UI``), held until a resolve."""
    why = human_request(ctl, "drain", node, reason,
                        "a reason is required (why the node leaves service)")
    with ctl._lock:
        rep = ctl._reports.get(node)
    sched = sched_now(ctl, node)
    if rep is None and sched is None:
        raise BackendError(f"unknown node {node}: no report and the scheduler does not say")
    if sched is not None and sched.state is not NodeSchedState.AVAILABLE and not sched.ours:
        raise BackendError(f"{node} is already {sched.state.value} by someone else "
                           f"(reason {sched.reason!r}): left as it is")
    now = ctl.clock.now()
    held = f"{by}: {why}"
    d = Decision(node, Verb.DRAIN, "human", (f"drained by {held}",),
                 BudgetVerdict(True, "human", f"a human decided ({by})"),
                 undo_command(ctl.scheduler, Verb.DRAIN, node), now,
                 reason=make_reason(f"human ({by}): {why}", ctl.owner))
    with ctl._mem_lock:
        before = ctl.memory
        m = before.nodes.get(node, EMPTY_MEMORY)
        m = replace(m, held=held, drained_at=now, healthy_since=None, last_hold=None,
                    seen_drained=False)
        mem = replace(before, nodes={**before.nodes, node: m})
        [audit_id] = ctl.store.begin_batch(mem, before, [d], ctl.dry_run)
        ctl.memory = mem
    ctl._execute(d, audit_id, sched)
    ctl.wake.set()
    return {"node": node, "drained": not ctl.dry_run, "held": held, "audit": [audit_id],
            "dry_run": ctl.dry_run}

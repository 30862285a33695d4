"""Pure builders of what ``status`` and ``explain`` answer (JSON-ready dicts)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from minutiae.controller.reconcile import Assessment
from minutiae.controller.state import Health, Pause, Verb, resolve_command, scheduler_undo
from minutiae.schedulers.base import HCP_OWNER, LEGACY_OWNER

_OUT = frozenset(("drained", "draining", "down"))


def tally(r: Mapping[str, Any]) -> tuple[str, ...]:
    """What one node row adds to ``status``'s counts: its health, and ``unavailable``,
    ``silent`` (in service by the scheduler's word, but no fresh report: the safety budget
    counts it unavailable), ``never_reported``, ``would_be_drained`` (dry-run) where they hold.
    :func:`count_rows` sums them; the web UI keeps the sum as rows change."""
    t = [r["health"]]
    if r["sched"] in _OUT:
        t.append("unavailable")
    elif r.get("silent"):
        t.append("silent")
    if r.get("report_age_s", 0) is None:
        t.append("never_reported")
    if r.get("would"):
        t.append("would_be_drained")
    return tuple(t)


def count_rows(rows: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """The rows' :func:`tally`, summed (one pass)."""
    c: Counter[str] = Counter()
    for r in rows:
        c.update(tally(r))
    return c


def status_view(counted: Mapping[str, int], nodes: int, *, dry_run: bool, scheduler: str,
                policy: str, pause: Pause | None, pending: int, last_step: float | None,
                counts: Mapping[str, int | float | None],
                problems: list[dict[str, Any]]) -> dict[str, Any]:
    """``counted``: the fleet's rows :func:`count_rows`, ``nodes`` of them."""
    return {
        "dry_run": dry_run, "scheduler": scheduler, "policy": policy, "nodes": nodes,
        "health": {h.value: counted.get(h.value, 0) for h in Health},
        "unavailable": counted.get("unavailable", 0),
        "silent": counted.get("silent", 0),
        "never_reported": counted.get("never_reported", 0),
        "paused": None if pause is None else {"reason": pause.reason, "since": pause.since,
                                              "by": pause.by},
        "pending_actions": pending, "last_step": last_step, "counters": dict(counts),
        "problems": problems}


def _drained_by(owner: str | None, reason: str | None) -> str:
    """Who made a drain that is not ours, in words."""
    if owner == HCP_OWNER:
        return (f"drained by minutiae's HealthCheckProgram (reason {reason!r}): `minutiae check "
                "--slurm` resumes it when the node checks healthy; this controller never does")
    if owner == LEGACY_OWNER:
        return (f"drained by an older minutiae (plain 'minutiae:' reason {reason!r}) that this "
                "controller has no record of making; left to a human (`minutiae resolve`, or "
                "the scheduler's own resume)")
    if owner is not None:
        return (f"drained by another minutiae controller, {owner} (reason {reason!r}); only "
                "it resumes its drains")
    return (f"drained by someone else (reason {reason!r}); minutiae never resumes a drain it "
            "does not own")


def explain_view(node: str, row: Mapping[str, Any], history: list[dict[str, Any]],
                 a: Assessment, me: str | None = None) -> dict[str, Any]:
    """Why ``node`` is where it is: someone else's drain (an admin's, the other minutiae
    path's), our drain (rule, evidence, budget, undo: ``minutiae resolve``), a held decision
    (which budget check, with numbers), or nothing in effect. ``me``: our owner tag."""
    last = next((h for h in history if h["action"] != Verb.HOLD.value), None)
    hold = history[0] if history and history[0]["action"] == Verb.HOLD.value else None
    if row.get("sched") in ("drained", "draining") and not row.get("ours"):
        why = _drained_by(row.get("owner"), row.get("reason"))
    elif last and last["action"] == Verb.DRAIN.value and row.get("ours"):
        why = f"drained by minutiae: rule {last['rule']}"
    elif hold:
        why = f"wanted to {hold['wanted']} but held: {hold['budget'].get('detail')}"
    elif row.get("would"):
        why = (f"dry-run: would be {row['would']} (rule {last['rule'] if last else '?'}); the "
               f"scheduler says {row.get('sched')}")
    elif row.get("silent"):
        why = ("silent: " + (row.get("why") or "no fresh report") + "; counted as unavailable "
               "by the safety budget, never drained or resumed on it")
    elif a.health is Health.UNKNOWN:
        why = "unknown, never treated as healthy: " + "; ".join(a.evidence)
    else:
        why = f"{a.health.value}; no action in effect"
    drained = row.get("sched") in ("drained", "draining") and row.get("ours")
    return {"node": node, "why": why, "state": dict(row), "health": a.health.value,
            "current_evidence": list(a.evidence), "last_action": last, "last_hold": hold,
            "undo": resolve_command(node) if drained else (last["undo"] if last else None),
            "scheduler_undo": (scheduler_undo(str(row.get("scheduler") or ""), node)
                               if drained else None),
            "identity": me, "history": history}

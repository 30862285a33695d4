"""Pure builders of what ``status`` and ``explain`` answer (JSON-ready dicts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from minutiae.controller.reconcile import Assessment
from minutiae.controller.state import Health, Pause, Verb


def status_view(rows: Sequence[Mapping[str, Any]], *, dry_run: bool, scheduler: str,
                policy: str, pause: Pause | None, pending: int, last_step: float | None,
                counts: Mapping[str, int | float | None],
                problems: list[dict[str, Any]]) -> dict[str, Any]:
    health = {h.value: 0 for h in Health}
    for r in rows:
        health[r["health"]] += 1
    return {
        "dry_run": dry_run, "scheduler": scheduler, "policy": policy, "nodes": len(rows),
        "health": health,
        "unavailable": sum(1 for r in rows if r["sched"] in ("drained", "draining", "down")),
        # in service by the scheduler's word, but no fresh report (counted as unavailable by
        # the safety budget)
        "silent": sum(1 for r in rows if r.get("silent")
                      and r["sched"] not in ("drained", "draining", "down")),
        "never_reported": sum(1 for r in rows if r.get("report_age_s", 0) is None),
        "paused": None if pause is None else {"reason": pause.reason, "since": pause.since,
                                              "by": pause.by},
        "pending_actions": pending, "last_step": last_step, "counters": dict(counts),
        "problems": problems}


def explain_view(node: str, row: Mapping[str, Any], history: list[dict[str, Any]],
                 a: Assessment) -> dict[str, Any]:
    """Why ``node`` is where it is: someone else's drain, our drain (rule, evidence, budget,
    undo), a held decision (which budget check, with numbers), or nothing in effect."""
    last = next((h for h in history if h["action"] != Verb.HOLD.value), None)
    hold = history[0] if history and history[0]["action"] == Verb.HOLD.value else None
    if row.get("sched") in ("drained", "draining") and not row.get("ours"):
        why = (f"drained by someone else (reason {row.get('reason')!r}); minutiae never "
               "resumes a drain it does not own")
    elif last and last["action"] == Verb.DRAIN.value and row.get("ours"):
        why = f"drained by minutiae: rule {last['rule']}"
    elif hold:
        why = f"wanted to {hold['wanted']} but held: {hold['budget'].get('detail')}"
    elif row.get("silent"):
        why = ("silent: " + (row.get("why") or "no fresh report") + "; counted as unavailable "
               "by the safety budget, never drained or resumed on it")
    else:
        why = f"{a.health.value}; no action in effect"
    return {"node": node, "why": why, "state": dict(row), "health": a.health.value,
            "current_evidence": list(a.evidence), "last_action": last, "last_hold": hold,
            "undo": last["undo"] if last else None, "history": history}

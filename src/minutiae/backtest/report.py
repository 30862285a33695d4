"""Backtest results as JSON and text, and the node-by-node difference of two policies (pure)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from minutiae.backtest.history import History
from minutiae.backtest.replay import Replay, summary
from minutiae.controller.state import Decision, Verb
from minutiae.scoring.damage import Damage


@dataclass(frozen=True, slots=True)
class NodeDiff:
    """How two policies treated one node: the drains (time, rule) each made, and the first
    decision where they part (``what``: ``only_a``, ``only_b``, ``earlier_a``, ``earlier_b`` or
    ``different_rule``). ``truth`` names the faults on the node that needed a drain."""

    node: str
    what: str
    a: tuple[tuple[float, str], ...]
    b: tuple[tuple[float, str], ...]
    truth: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "what": self.what, "truth": list(self.truth),
                "a": [{"time": t, "rule": r} for t, r in self.a],
                "b": [{"time": t, "rule": r} for t, r in self.b]}


def _drains(r: Replay) -> dict[str, list[tuple[float, str]]]:
    out: dict[str, list[tuple[float, str]]] = {}
    for d in r.drains:
        out.setdefault(d.node, []).append((d.time, d.rule))
    return out


def diff(a: Replay, b: Replay, history: History | None = None, same_within_s: float = 300.0) -> list[NodeDiff]:
    """Nodes the two policies drained differently (missing drains, earlier/later by more than
    ``same_within_s``, or drains by different rules), sorted by node."""
    da, db = _drains(a), _drains(b)
    need: dict[str, list[str]] = {}
    for t in history.truth if history is not None else ():
        if t.harmful and t.expect_drain and t.node:
            need.setdefault(t.node, []).append(f"{t.id}:{t.cls}")
    out = []
    for node in sorted(set(da) | set(db)):
        xa, xb = tuple(da.get(node, ())), tuple(db.get(node, ()))
        what = ""
        if not xb:
            what = "only_a"
        elif not xa:
            what = "only_b"
        else:
            ta, tb = xa[0][0], xb[0][0]
            if ta < tb - same_within_s:
                what = "earlier_a"
            elif tb < ta - same_within_s:
                what = "earlier_b"
            elif len(xa) != len(xb):
                what = "more_a" if len(xa) > len(xb) else "more_b"
            elif [r for _t, r in xa] != [r for _t, r in xb]:
                what = "different_rule"
        if what:
            out.append(NodeDiff(node, what, xa, xb, tuple(need.get(node, ()))))
    return out


def _decision_json(d: Decision) -> dict[str, Any]:
    return {"time": d.time, "action": d.action.value, "rule": d.rule,
            "wanted": d.wanted.value if d.wanted else None, "budget": d.budget.to_json(),
            "step": d.step.label if d.step else None, "reason": d.reason,
            "evidence": list(d.evidence[:5]), "undo": d.undo}


def to_json(r: Replay, history: History) -> dict[str, Any]:
    nodes: dict[str, list[dict[str, Any]]] = {}
    for d in r.decisions:
        nodes.setdefault(d.node, []).append(_decision_json(d))
    return {
        "history": r.history, "layout": history.layout, "policy": r.policy,
        "start": history.start, "end": history.end, "nodes_in_fleet": len(history.nodes),
        "honour_maintenance": history.honour_maintenance,
        "summary": summary(r),
        "rules": [{"rule": s.rule, "drains": s.drains, "nodes": s.nodes, "holds": s.holds,
                   "repeat_nodes": s.repeat_nodes} for s in r.rules()],
        "alerts": [{"time": t, "text": a} for t, a in r.alerts],
        "held_missed": list(r.held_missed),
        "damage": [d.to_json() for d in history.damage],
        "score": r.score.to_json() if r.score is not None else None,
        "nodes": nodes,
    }


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(t))


def _table(rows: Sequence[Sequence[object]], head: Sequence[str]) -> list[str]:
    cells = [[str(c) for c in head]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in cells]


def render(r: Replay, history: History, label: str = "") -> list[str]:
    """The text report of one replay."""
    s = summary(r)
    days = (history.end - history.start) / 86400.0
    out = [f"backtest{(' ' + label) if label else ''}: policy {r.policy}",
           f"  history {history.source} ({history.layout}): {len(history.nodes)} nodes, "
           f"{days:.1f} days, {_when(history.start)} → {_when(history.end)} UTC, "
           f"step {r.step_s:g}s",
           f"  drained {s['drains']} time(s) on {s['nodes_drained']} node(s); resumed "
           f"{s['resumes']}; escalated {s['escalations']}; held back {s['holds']} "
           f"({s['held_node_hours']} node-hours)"
           + (f" by {', '.join(f'{k} {v}' for k, v in s['holds_by_check'].items())}"
              if s["holds_by_check"] else "")]
    if history.maintenance:
        mode = ("honoured: nodes in planned maintenance are left alone" if history.honour_maintenance
                else "IGNORED (--ignore-maintenance): planned reboots look like faults")
        out.append(f"  planned maintenance: {s['maintenance_windows']} window(s), {mode}; "
                   f"{s['maintenance_findings_suppressed']} drain-worthy finding(s) inside them "
                   "not acted on")
    if r.score is not None:
        out.append(f"  against truth: {s['right_drains']} right drain(s), {s['wrong_drains']} "
                   f"wrong, {s['missed_drains']} missed ({s['missed_held_by_budget']} of them held "
                   f"back by the budget); GPU-hours saved {s['gpu_hours_saved']}")
        if s["wrong_drain_causes"]:
            out.append("  wrong drains by what the truth says happened: " + ", ".join(
                f"{k} {v}" for k, v in s["wrong_drain_causes"].items()))
    out += damage_lines(history.damage)
    for t, a in r.alerts[:10]:
        out.append(f"  STORM {_when(t)}: {a}")
    if len(r.alerts) > 10:
        out.append(f"  … {len(r.alerts) - 10} more storm alert(s)")
    rules = r.rules()
    if rules:
        out.append("  per rule:")
        out += _table([(x.rule, x.drains, x.nodes, x.holds, x.repeat_nodes) for x in rules],
                      ("rule", "drains", "nodes", "holds", "nodes drained 2+ times"))
        repeat = [x for x in rules if x.repeat_nodes]
        for x in repeat:
            out.append(f"  repeat-rule storm? {x.rule} drained {x.repeat_nodes} node(s) more than "
                       "once: check its debounce/hysteresis or the healthy delay")
    return out


#: damage lines printed in the text report (all of them are in the JSON)
DAMAGE_LINES = 20


def damage_lines(damage: Sequence[Damage]) -> list[str]:
    """One line per damaged input: the node-window it makes UNKNOWN (never healthy)."""
    if not damage:
        return []
    out = [f"  damaged input: {len(damage)} file(s); the node-windows below are UNKNOWN (not "
           "reporting: neither healthy nor drained)"]
    out += [f"    {d.message()}" for d in damage[:DAMAGE_LINES]]
    if len(damage) > DAMAGE_LINES:
        out.append(f"    … {len(damage) - DAMAGE_LINES} more (--json lists them all)")
    return out


def render_diff(a: Replay, b: Replay, diffs: Sequence[NodeDiff]) -> list[str]:
    out = [f"difference, node by node: A = {a.policy}, B = {b.policy}"]
    if not diffs:
        return [*out, "  none: both policies drained the same nodes at the same times"]
    counts: dict[str, int] = {}
    for d in diffs:
        counts[d.what] = counts.get(d.what, 0) + 1
    out.append("  " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    rows = []
    for d in diffs:
        fa = f"{_when(d.a[0][0])} {d.a[0][1]}" + (f" (+{len(d.a) - 1})" if len(d.a) > 1 else "") if d.a else "–"
        fb = f"{_when(d.b[0][0])} {d.b[0][1]}" + (f" (+{len(d.b) - 1})" if len(d.b) > 1 else "") if d.b else "–"
        rows.append((d.node, d.what, fa, fb, ",".join(d.truth) or "–"))
    out += _table(rows, ("node", "difference", "A first drain", "B first drain", "faults needing a drain"))
    return out


def decisions_of(r: Replay, verb: Verb) -> list[Decision]:
    return [d for d in r.decisions if d.action is verb]

"""The web UI's HTML fragments (pure: dicts from ``status``/``node_rows``/``explain``/audit in,
escaped HTML out). ``controller/http/ui.py`` serves them."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from minutiae.schedulers.base import NOTHING_TO_UNDO

PAGE = 20_000
_RANGE = re.compile(r"^([^\[\]]*)\[([0-9,\-]+)\]([^\[\]]*)$")
GROUPS = ("rack", "leaf", "nvl_domain", "none")
_PREFIX = re.compile(r"^minutiae(\[[^\]]*\])?:\s*")   # a scheduler reason's owner prefix


def esc(x: object) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def expand_hostlist(expr: str, limit: int = 100_000) -> set[str] | None:
    """``gpu[001-003,007],cpu1`` → the names; None when ``expr`` is not a hostlist with a range
    or names over ``limit`` nodes in all (a plain substring search then applies)."""
    out: set[str] = set()
    ranged = False
    for part in re.split(r",(?![^\[]*\])", expr.strip()):
        m = _RANGE.match(part.strip())
        if m is None:
            if part.strip():
                out.add(part.strip())
            continue
        ranged = True
        pre, body, post = m.groups()
        for item in body.split(","):
            a, _, b = item.partition("-")
            if not a.isdigit() or (b and not b.isdigit()):
                return None
            lo, hi = int(a), int(b or a)
            if hi - lo + len(out) > limit:   # bounded: the whole expression, not each range
                return None
            out.update(f"{pre}{i:0{len(a)}d}{post}" for i in range(lo, hi + 1))
    return out if ranged else None


def _keep(r: Mapping[str, Any], names: set[str] | None, q: str, health: str,
          sched: str) -> bool:
    if names is not None and r["node"] not in names:
        return False
    if names is None and q and q not in r["node"]:
        return False
    if health and r["health"] != health:
        return False
    if sched == "silent":
        return bool(r.get("silent"))
    if sched == "drained" and str(r.get("would") or "").startswith("drained"):
        return True   # dry-run: would be drained
    return not sched or r.get("sched") == sched


#: a row's group and tile, kept by the row's identity and the grouping (the row is kept with
#: them, so the id stays its own)
Tiles = dict[tuple[int, str], tuple[Mapping[str, Any], str, str]]


def _tile(r: Mapping[str, Any]) -> str:
    cls = f"t h-{r['health']}"
    if r.get("sched") and r["sched"] != "available":
        cls += f" s-{r['sched']}"
    if str(r.get("would") or "").startswith("drained"):   # dry-run: what it would do
        cls += " s-drained would"
    if r.get("silent"):
        cls += " silent"
    return f'<a class="{cls}" data-n="{esc(r["node"])}"></a>'   # hover: the page's #hover line


def fleet_map(rows: Sequence[Mapping[str, Any]], *, q: str = "", health: str = "",
              sched: str = "", group: str = "rack", page: int = 0,
              tiles: Tiles | None = None) -> str:
    """Every matching node as a tile coloured by health, outlined when drained, faded when
    silent; grouped by a topology domain; ``PAGE`` tiles a page. ``tiles``: the tiles of rows
    rendered before (a row is never changed in place: the web UI's snapshot keeps its rows
    while their node does not change), filled as rows are rendered."""
    q = q.strip()
    names = expand_hostlist(q) if q else None
    keep = [r for r in rows if _keep(r, names, q, health, sched)] if q or health or sched \
        else rows   # no filter: every row (the page's default view)
    total = len(keep)
    shown = keep[page * PAGE:(page + 1) * PAGE]
    groups: dict[str, list[str]] = {}
    key = group if group in GROUPS else "rack"
    for r in shown:
        hit = None if tiles is None else tiles.get((id(r), key))
        if hit is None or hit[0] is not r:
            g = "all nodes" if key == "none" else \
                f"{key} {r.get('domains', {}).get(key) or '(none)'}"
            hit = (r, g, _tile(r))
            if tiles is not None:
                tiles[id(r), key] = hit
        groups.setdefault(hit[1], []).append(hit[2])
    parts = [f'<p id="count">{total} of {len(rows)} node(s)'
             f'{f" · page {page + 1}" if total > PAGE else ""}</p>']
    for g in sorted(groups):
        parts.append(f'<div class="grp"><h3>{esc(g)} ({len(groups[g])})</h3>'
                     f'{"".join(groups[g])}</div>')
    if total > (page + 1) * PAGE:
        parts.append(f'<button hx-get="/ui/fragments/map?page={page + 1}" hx-include="#filter" '
                     'hx-target="#map">next page</button>')
    return "".join(parts)


def _when(t: float | None) -> str:
    return "–" if t is None else time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))


def status_bar(st: Mapping[str, Any], authed: bool) -> str:
    """Health counts, silent nodes, leader/standby (when the controller says), pause/breaker."""
    h = st["health"]
    bits = [f'<span class="badge">{st["nodes"]} nodes</span>',
            f'<span class="badge ok">{h.get("healthy", 0)} healthy</span>',
            f'<span class="badge bad">{h.get("unhealthy", 0)} unhealthy</span>',
            f'<span class="badge warn">{h.get("unknown", 0)} unknown</span>',
            f'<span class="badge" id="silent">{st["silent"]} silent</span>',
            f'<span class="badge">{st["unavailable"]} unavailable</span>']
    if "role" in st:
        lead = f' (leader {esc(st.get("leader"))})' if st["role"] != "leader" else ""
        bits.append(f'<span class="badge" id="role">{esc(st["role"])} · epoch '
                    f'{esc(st.get("epoch"))}{lead}</span>')
    if st.get("dry_run"):
        bits.append('<span class="badge warn" title="decides and audits, never touches the '
                    'scheduler">dry-run</span>')
    p = st.get("paused")
    if p:
        what = "breaker tripped" if p.get("by") == "breaker" else "paused"
        reason = _PREFIX.sub("", str(p["reason"]))
        bits.append(f'<span class="badge bad" id="paused">{what}: {esc(reason)} '
                    f'(since {_when(p.get("since"))})</span>')
        if authed:
            bits.append('<button hx-post="/ui/actions/unpause" hx-target="#status" '
                        'id="unpause">unpause</button>')
    else:
        bits.append('<span class="badge ok" id="paused">not paused</span>')
        if authed:
            bits.append('<form class="inline" hx-post="/ui/actions/pause" hx-target="#status">'
                        '<input name="reason" placeholder="pause reason" size="16"> '
                        '<button id="pause">pause</button></form>')
    return " ".join(bits)


def node_panel(ex: Mapping[str, Any], authed: bool) -> str:
    """``explain``: why, evidence, rule, budget verdict, undo, audit history, actions."""
    node = esc(ex["node"])
    st = ex.get("state", {})
    last = ex.get("last_action") or {}
    hold = ex.get("last_hold") or {}
    ev = ex.get("current_evidence") or last.get("evidence") or []
    budget = (last or hold).get("budget") or {}
    out = [f'<div hx-get="/ui/fragments/node/{node}" hx-target="#node" '
           """hx-trigger="every 10s [uiIdle('#node')]"></div>""",
           f'<h2 id="node-name">{node}</h2>', f'<p id="why">{esc(ex["why"])}</p>',
           f'<p>health <b>{esc(ex.get("health"))}</b> · scheduler <b>{esc(st.get("sched"))}</b>'
           f' · rule <b id="rule">{esc(last.get("rule") or st.get("rule"))}</b></p>',
           f'<p>budget: {esc(budget.get("check"))} {esc(budget.get("detail"))}</p>',
           "<h3>Evidence</h3>",
           f'<pre id="evidence">{esc(chr(10).join(map(str, ev)) or "(none)")}</pre>']
    if ex.get("undo"):
        out.append(f'<p>undo: <code>{esc(ex["undo"])}</code></p>')
    out.append(_node_actions(ex) if authed else "<p><i>log in with the token to act</i></p>")
    out.append("<h3>History</h3>" + audit_table(ex.get("history", []), limit=20))
    return "".join(out)


def _node_actions(ex: Mapping[str, Any]) -> str:
    """Resolve, drain (when in service) and undo (of our last drain or resume) forms."""
    node = esc(ex["node"])
    sched = (ex.get("state") or {}).get("sched")
    last = (ex.get("last_action") or {}).get("action")
    out = [f'<form hx-post="/ui/actions/resolve/{node}" hx-target="#node">'
           '<input name="reason" placeholder="what was done (required)" size="26" '
           'aria-label="resolve reason"> <label><input type="checkbox" name="now" value="1"> '
           'resume now</label> <button id="resolve">resolve</button></form>']
    if sched in ("available", None):
        out.append(f'<form hx-post="/ui/actions/drain/{node}" hx-target="#node">'
                   '<input name="reason" placeholder="why drain it (required)" size="26" '
                   'aria-label="drain reason"> <button id="drain">drain</button></form>')
    undo = {"drain": "undo the drain: resume now", "resume": "undo the resume: drain again"}
    if last in undo and ex.get("undo") != NOTHING_TO_UNDO:   # dry-run: resolve forgets it
        out.append(f'<form hx-post="/ui/actions/undo/{node}" hx-target="#node">'
                   f'<button id="undo">{undo[last]}</button></form>')
    return '<div class="actions">' + "".join(out) + "</div>"


def done(out: Mapping[str, Any]) -> str:
    """What an action did, one line."""
    node = esc(out["node"])
    if "held" in out:
        what = "drained" if out.get("drained") else "would be drained (dry-run)"
        return f'<p class="badge ok" id="done">{node} {what}; held until resolved</p>'
    return (f'<p class="badge ok" id="done">resolved {node}: resumed '
            f'{esc(out.get("resumed") or "no (not our drain)")}</p>')


def _since(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() if text else None
    except ValueError:
        return None


def audit_table(rows: Sequence[Mapping[str, Any]], *, rule: str = "", action: str = "",
                since: str = "", limit: int = 200) -> str:
    """Audit rows (newest first) filtered by rule, action and time (UTC), ``limit`` shown."""
    t0 = _since(since)
    keep = [a for a in rows if (not rule or a.get("rule") == rule)
            and (not action or a.get("action") == action)
            and (t0 is None or (a.get("time") or 0) >= t0)]
    body = "".join(
        f'<tr><td>{_when(a.get("time"))}</td><td>{esc(a.get("node"))}</td>'
        f'<td>{esc(a.get("action"))}</td><td>{esc(a.get("rule"))}</td>'
        f'<td>{esc(a.get("status"))}</td><td>{esc((a.get("budget") or {}).get("detail"))}</td>'
        "</tr>" for a in keep[:limit])
    return (f'<p>{len(keep)} row(s)</p><table class="audit"><tr><th>time</th><th>node</th>'
            f"<th>action</th><th>rule</th><th>status</th><th>budget</th></tr>{body}</table>")

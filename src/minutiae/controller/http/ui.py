"""The live web UI at ``/ui`` (htmx fragments; see ``docs/ui.md``).

One page (``static/ui.html``) whose parts are HTML fragments the server renders
(``controller/http/pages.py``) and htmx swaps in, polled every few seconds: the status bar
(pause, breaker and its reason, silent nodes, leader/standby), the fleet map (server-side
filter, hostlist search, grouping and paging), a node's explanation and the audit log.

Read-only without the token; sessions and CSRF: ``ui_session.py``; the actions (pause, resolve,
drain, undo): ``ui_actions.py``. With a read-only token (``serve --read-token-file``) the map,
node and audit views need a session, like ``/v1/nodes``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from importlib import resources
from string import Template
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from minutiae.controller import queries
from minutiae.controller.http import pages, ui_actions
from minutiae.controller.http.ui_session import COOKIE, Session, Sessions, Snapshot, form
from minutiae.controller.reconcile import assess
from minutiae.controller.service import Controller
from minutiae.controller.views import explain_view
from minutiae.errors import MinutiaeError
from minutiae.schedulers.base import validate_node

_STATIC = {"htmx.min.js": "text/javascript", "htmx.LICENSE": "text/plain",
           "ui.css": "text/css", "ui.js": "text/javascript"}


def _static(name: str) -> bytes:
    return resources.files("minutiae.controller.http").joinpath("static", name).read_bytes()


def _login_box(s: Session | None, closed: bool) -> str:
    if s is not None:
        badge = ('<span class="badge ok">actions enabled</span>' if s.admin else
                 '<span class="badge">read-only session (read token)</span>')
        return (f'<form class="inline" method="post" action="/ui/logout">{badge} '
                '<button>log out</button></form>')
    return ('<form class="inline" method="post" action="/ui/login">'
            '<input type="password" name="token" placeholder="controller token" '
            'autocomplete="off" aria-label="controller token"> <button id="login">log in</button>'
            f'</form> <span class="badge">{"log in to see nodes" if closed else "read-only"}'
            '</span>')


def router(controller: Controller, token: str,
           refused: Callable[[str], None] = lambda why: None,
           read_token: str | None = None) -> APIRouter:
    r = APIRouter(include_in_schema=False)
    s = Sessions(token, read_token)
    page = Template(_static("ui.html").decode())

    @r.get("/ui", response_class=HTMLResponse)
    async def ui(request: Request) -> HTMLResponse:
        sess = s.session(request)
        html = page.substitute(csrf=s.csrf(sess), login=_login_box(sess, s.closed_reads))
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})

    @r.get("/ui/static/{name}")
    async def static(name: str) -> Response:
        if name not in _STATIC:
            return Response("no such file", status_code=404, media_type="text/plain")
        return Response(_static(name), media_type=_STATIC[name],
                        headers={"Cache-Control": "max-age=3600"})

    @r.post("/ui/login")
    async def login(request: Request) -> Response:
        cookie = s.login((await form(request)).get("token", ""))
        if cookie is None:
            refused("ui_login")
            return HTMLResponse("wrong token: <a href='/ui'>back</a>", status_code=401)
        out = RedirectResponse("/ui", status_code=303)
        out.set_cookie(COOKIE, cookie, httponly=True, samesite="strict", path="/ui")
        return out

    @r.post("/ui/logout")
    async def logout() -> Response:
        out = RedirectResponse("/ui", status_code=303)
        out.delete_cookie(COOKIE, path="/ui")
        return out

    snap = Snapshot(controller)
    _fragments(r, controller, s, snap)
    ui_actions.routes(r, controller, s, snap, refused)
    return r


def explain_from(controller: Controller, node: str) -> dict[str, Any]:
    """``explain`` without asking the scheduler (the controller's ``explain`` reads the node's
    state live: a ``scontrol`` call per click); a node out of the fleet goes to ``explain``."""
    row = queries.node_row(controller, node)
    if row is None:
        return controller.explain(node)
    history = [a.to_json() for a in controller.store.audit(node=node, limit=20)]
    m = controller.memory.nodes.get(node)
    a = assess(controller.intake.reports.get(node), controller.policy, controller.clock.now(),
               m.acked if m else frozenset())
    return explain_view(node, {**row, "scheduler": controller.scheduler}, history, a,
                        me=controller.owner)


def _closed() -> HTMLResponse:
    return HTMLResponse('<p class="refused">this controller has a read-only token: log in '
                        "(read-only or admin token) to see nodes, evidence and the audit log</p>",
                        status_code=401)


def _fragments(r: APIRouter, controller: Controller, s: Sessions, snap: Snapshot) -> None:
    """The read-only fragments (no token; with a read-only token configured, a session)."""

    @r.get("/ui/fragments/status", response_class=HTMLResponse)
    def status(request: Request) -> str:
        sess = s.session(request)
        return pages.status_bar(snap.get()[1], sess is not None and sess.admin)

    @r.get("/ui/fragments/map", response_class=HTMLResponse)
    def fleet_map(request: Request, q: str = "", health: str = "", sched: str = "",
                  group: str = "rack", page: int = 0, v: str = "") -> Response:
        """``v``: the version the page shows (the poll sends it): unchanged → 204, no swap."""
        if not s.can_read(request):
            return _closed()
        page = max(0, page)
        html = snap.render(("map", q, health, sched, group, page), lambda rows: pages.fleet_map(
            rows, q=q, health=health, sched=sched, group=group, page=page, tiles=snap.tiles))
        version = hashlib.blake2b(html.encode(), digest_size=8).hexdigest()
        if v == version:
            return Response(status_code=204)
        return HTMLResponse(html.replace('<p id="count">', f'<p id="count" data-v="{version}">',
                                         1))

    @r.get("/ui/fragments/node/{node}", response_class=HTMLResponse)
    def node(request: Request, node: str) -> Response:
        if not s.can_read(request):
            return _closed()
        try:
            validate_node(node)
            ex = explain_from(controller, node)
        except MinutiaeError as exc:
            return HTMLResponse(f'<p class="refused">{pages.esc(exc)}</p>', status_code=404)
        sess = s.session(request)
        return HTMLResponse(pages.node_panel(ex, sess is not None and sess.admin))

    @r.get("/ui/fragments/audit", response_class=HTMLResponse)
    def audit(request: Request, node: str = "", rule: str = "", action: str = "",
              since: str = "") -> Response:
        if not s.can_read(request):
            return _closed()
        if node:
            try:
                validate_node(node)
            except MinutiaeError as exc:
                return HTMLResponse(f'<p class="refused">{pages.esc(exc)}</p>', status_code=422)
        rows = [a.to_json() for a in controller.store.audit(node=node or None, limit=5000)]
        return HTMLResponse(pages.audit_table(rows, rule=rule, action=action, since=since))

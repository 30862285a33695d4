"""The live web UI at ``/ui`` (htmx fragments; see ``docs/ui.md``).

One page (``static/ui.html``) whose parts are HTML fragments the server renders
(``controller/http/pages.py``) and htmx swaps in, polled every few seconds: the status bar
(pause, breaker and its reason, silent nodes, leader/standby), the fleet map (server-side
filter, hostlist search, grouping and paging), a node's explanation and the audit log.

Read-only without the token. ``POST /ui/login`` with the controller's token sets a session
cookie (HttpOnly, SameSite=Strict): ``nonce.HMAC(token, nonce)``, so it survives a controller
restart and dies with a token change; every action (``/ui/actions/…``) needs that cookie AND
the CSRF token ``HMAC(token, "csrf" + nonce)`` in ``X-CSRF-Token`` (htmx sends it from the
page). Anything else is refused (401/403) and nothing changes.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from importlib import resources
from string import Template
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from minutiae.controller.http import pages
from minutiae.controller.reconcile import assess
from minutiae.controller.service import Controller
from minutiae.controller.views import explain_view
from minutiae.errors import MinutiaeError
from minutiae.schedulers.base import make_reason, validate_node

COOKIE = "minutiae_ui"
_STATIC = {"htmx.min.js": "text/javascript", "htmx.LICENSE": "text/plain"}


def _static(name: str) -> bytes:
    return resources.files("minutiae.controller.http").joinpath("static", name).read_bytes()


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form body (htmx's default), without python-multipart; 64 KiB at most."""
    body = await request.body()
    if len(body) > 65536:
        raise HTTPException(413, "form over 64 KiB")
    return {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}


class Snapshot:
    """The fleet's rows and status for the UI, rebuilt by a background thread every
    ``every_s`` while the UI is used (stops after ``idle_s`` without a request): a 20,000-node
    ``node_rows`` costs 100-300 ms, so requests read the last snapshot instead of paying it."""

    def __init__(self, controller: Controller, every_s: float = 2.0, idle_s: float = 60.0):
        self.ctl, self.every_s, self.idle_s = controller, every_s, idle_s
        self.lock = threading.Lock()
        self.data: tuple[list[dict[str, Any]], dict[str, Any]] | None = None
        self.used = 0.0
        self.thread: threading.Thread | None = None

    def _build(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return self.ctl.node_rows(), self.ctl.status()

    def _run(self) -> None:
        while time.monotonic() - self.used < self.idle_s:
            try:
                self.data = self._build()
            except Exception as exc:  # keep the UI up; say what failed
                self.ctl.problem(f"web UI snapshot failed: {type(exc).__name__}: {exc}")
            time.sleep(self.every_s)
        with self.lock:
            self.thread = None

    def get(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self.used = time.monotonic()
        with self.lock:
            if self.data is None:
                self.data = self._build()
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True,
                                               name="minutiae-ui-snapshot")
                self.thread.start()
            return self.data

    def fresh(self) -> None:
        """After an action: the next request sees it."""
        with self.lock:
            self.data = self._build()


class Sessions:
    """Stateless sessions and CSRF tokens derived from the controller's token."""

    def __init__(self, token: str) -> None:
        self.key = token.encode()

    def _mac(self, what: str) -> str:
        return hmac.new(self.key, what.encode(), hashlib.sha256).hexdigest()

    def new(self) -> str:
        nonce = secrets.token_hex(16)
        return f"{nonce}.{self._mac('session' + nonce)}"

    def nonce(self, cookie: str | None) -> str | None:
        """The session's nonce when ``cookie`` is a valid session, else None."""
        nonce, _, mac = (cookie or "").partition(".")
        if not nonce or not hmac.compare_digest(mac, self._mac("session" + nonce)):
            return None
        return nonce

    def csrf(self, nonce: str) -> str:
        return self._mac("csrf" + nonce)[:32]

    def check(self, request: Request) -> str:
        """The session nonce of an action request; 401 without a session, 403 for a missing
        or stale CSRF token."""
        nonce = self.nonce(request.cookies.get(COOKIE))
        if nonce is None:
            raise HTTPException(401, "log in with the controller token first")
        got = request.headers.get("x-csrf-token", "")
        if not hmac.compare_digest(got.encode(), self.csrf(nonce).encode()):
            raise HTTPException(403, "missing or stale CSRF token: reload the page")
        return nonce


def router(controller: Controller, token: str,
           refused: Callable[[str], None] = lambda why: None) -> APIRouter:
    r = APIRouter(include_in_schema=False)
    s = Sessions(token)
    page = Template(_static("ui.html").decode())

    def authed(request: Request) -> str | None:
        return s.nonce(request.cookies.get(COOKIE))

    @r.get("/ui", response_class=HTMLResponse)
    async def ui(request: Request) -> HTMLResponse:
        nonce = authed(request)
        login = ('<form class="inline" method="post" action="/ui/logout"><span class="badge ok">'
                 'actions enabled</span> <button>log out</button></form>' if nonce else
                 '<form class="inline" method="post" action="/ui/login">'
                 '<input type="password" name="token" placeholder="controller token" '
                 'autocomplete="off"> <button>log in</button></form> '
                 '<span class="badge">read-only</span>')
        html = page.substitute(csrf=s.csrf(nonce) if nonce else "", login=login)
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})

    @r.get("/ui/static/{name}")
    async def static(name: str) -> Response:
        if name not in _STATIC:
            raise HTTPException(404, "no such file")
        return Response(_static(name), media_type=_STATIC[name],
                        headers={"Cache-Control": "max-age=3600"})

    @r.post("/ui/login")
    async def login(request: Request) -> Response:
        token_ = (await _form(request)).get("token", "")
        if not hmac.compare_digest(token_.encode(), token.encode()):
            refused("ui_login")
            return HTMLResponse("wrong token: <a href='/ui'>back</a>", status_code=401)
        out = RedirectResponse("/ui", status_code=303)
        out.set_cookie(COOKIE, s.new(), httponly=True, samesite="strict", path="/ui")
        return out

    @r.post("/ui/logout")
    async def logout() -> Response:
        out = RedirectResponse("/ui", status_code=303)
        out.delete_cookie(COOKIE, path="/ui")
        return out

    snap = Snapshot(controller)
    _fragments(r, controller, s, snap)
    _actions(r, controller, s, snap, refused)
    return r


def explain_from(controller: Controller, rows: list[dict[str, Any]], node: str
                 ) -> dict[str, Any]:
    """``explain`` from the snapshot's row (the controller's ``explain`` rebuilds every node's
    row: 100-300 ms at 20,000 nodes); a node not in the snapshot goes to ``explain``."""
    row = next((x for x in rows if x["node"] == node), None)
    if row is None:
        return controller.explain(node)
    history = [a.to_json() for a in controller.store.audit(node=node, limit=20)]
    m = controller.memory.nodes.get(node)
    a = assess(controller.intake.reports.get(node), controller.policy, controller.clock.now(),
               m.acked if m else frozenset())
    return explain_view(node, {**row, "scheduler": controller.scheduler}, history, a,
                        me=controller.owner)


def _fragments(r: APIRouter, controller: Controller, s: Sessions, snap: Snapshot) -> None:
    """The read-only fragments (no token)."""

    def authed(request: Request) -> str | None:
        return s.nonce(request.cookies.get(COOKIE))

    @r.get("/ui/fragments/status", response_class=HTMLResponse)
    def status(request: Request) -> str:
        return pages.status_bar(snap.get()[1], authed(request) is not None)

    @r.get("/ui/fragments/map", response_class=HTMLResponse)
    def fleet_map(q: str = "", health: str = "", sched: str = "", group: str = "rack",
                  page: int = 0) -> str:
        return pages.fleet_map(snap.get()[0], q=q, health=health, sched=sched,
                               group=group, page=max(0, page))

    @r.get("/ui/fragments/node/{node}", response_class=HTMLResponse)
    def node(request: Request, node: str) -> str:
        try:
            validate_node(node)
            ex = explain_from(controller, snap.get()[0], node)
        except MinutiaeError as exc:
            return pages.esc(str(exc))
        return pages.node_panel(ex, authed(request) is not None)

    @r.get("/ui/fragments/audit", response_class=HTMLResponse)
    def audit(node: str = "", rule: str = "", action: str = "", since: str = "") -> str:
        if node:
            try:
                validate_node(node)
            except MinutiaeError as exc:
                return pages.esc(str(exc))
        rows = [a.to_json() for a in controller.store.audit(node=node or None, limit=5000)]
        return pages.audit_table(rows, rule=rule, action=action, since=since)



def _actions(r: APIRouter, controller: Controller, s: Sessions, snap: Snapshot,
             refused: Callable[[str], None]) -> None:
    """The mutating routes: session cookie + CSRF header, else 401/403 and nothing done."""

    def act(request: Request) -> None:
        try:
            s.check(request)
        except HTTPException as exc:
            refused("ui_" + ("session" if exc.status_code == 401 else "csrf"))
            raise

    @r.post("/ui/actions/pause", response_class=HTMLResponse)
    async def pause(request: Request) -> str:
        act(request)
        reason = (await _form(request)).get("reason", "")
        try:
            controller.pause(make_reason(reason or "paused from the web UI"))
        except MinutiaeError as exc:
            raise HTTPException(422, str(exc)) from None
        await run_in_threadpool(snap.fresh)
        return pages.status_bar(snap.get()[1], True)

    @r.post("/ui/actions/unpause", response_class=HTMLResponse)
    async def unpause(request: Request) -> str:
        act(request)
        controller.unpause()
        await run_in_threadpool(snap.fresh)
        return pages.status_bar(snap.get()[1], True)

    @r.post("/ui/actions/resolve/{node}", response_class=HTMLResponse)
    async def resolve(request: Request, node: str) -> str:
        act(request)
        form = await _form(request)
        try:
            validate_node(node)
            out: dict[str, Any] = await run_in_threadpool(
                controller.resolve, node, form.get("reason", ""), now=bool(form.get("now")),
                by="web UI")
            ex = await run_in_threadpool(controller.explain, node)
            await run_in_threadpool(snap.fresh)
        except MinutiaeError as exc:
            raise HTTPException(422, str(exc)) from None
        return pages.resolved(out) + pages.node_panel(ex, True)

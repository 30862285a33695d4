"""The web UI's mutating routes (``POST /ui/actions/…``): pause, unpause, and per node resolve,
drain and undo. Each needs an admin session and the CSRF header (``ui_session.Sessions.check``):
else 401/403, counted in ``minutiae_controller_refused_total{why="ui_…"}``, and nothing
changes. Errors come back as an HTML line (htmx shows it in ``#msg``), never a 5xx.

- *resolve*: ``minutiae resolve`` (acknowledge the findings; resume after the healthy delay, or
  at once with *resume now*), audited ``by web UI``.
- *drain*: a human's drain through minutiae (``controller/human_drain.py``): held until a
  resolve.
- *undo* of the node's last action: our drain → resolve and resume now; a resume → drain again
  (held). Anything else has nothing to undo (409).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from minutiae.controller import human_drain
from minutiae.controller.http import pages
from minutiae.controller.http.ui_session import Refused, Sessions, Snapshot, form
from minutiae.controller.service import Controller
from minutiae.controller.state import Verb
from minutiae.errors import BackendError, BackendUnavailable, MinutiaeError, StoreError
from minutiae.schedulers.base import make_reason, validate_node

BY = "web UI"
Action = Callable[[dict[str, str]], Awaitable[str]]


def _code(exc: MinutiaeError) -> int:
    """422 for bad input, 503 for an unreachable scheduler or store, 409 when the controller's
    role or the node's state conflicts with the action (standby, someone else's drain)."""
    if isinstance(exc, BackendUnavailable | StoreError):
        return 503
    return 409 if isinstance(exc, BackendError) else 422


def _error(code: int, text: str) -> HTMLResponse:
    return HTMLResponse(f'<p class="refused">{pages.esc(text)}</p>', status_code=code)


def undo(controller: Controller, node: str) -> dict[str, Any]:
    """Undo the node's last action (see the module)."""
    ex = controller.explain(node)
    last = ex.get("last_action") or {}
    if last.get("action") == Verb.DRAIN.value:   # not ours any more: acknowledged, not resumed
        return controller.resolve(node, f"undo of the drain by {last.get('rule')}", now=True,
                                  by=BY)
    if last.get("action") == Verb.RESUME.value:
        return human_drain.drain(controller, node, "undo of the resume", by=BY)
    raise Refused(409, "ui_nothing_to_undo",
                  f"{node}: nothing to undo (last action: {last.get('action') or 'none'})")


def routes(r: APIRouter, controller: Controller, s: Sessions, snap: Snapshot,
           refused: Callable[[str], None]) -> None:
    def guarded(fn: Action) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            try:
                s.check(request)
            except Refused as exc:
                refused(exc.why)
                return _error(exc.code, str(exc))
            f = await form(request)
            if "\0" in f:
                return _error(413, f["\0"])
            f.update({k: str(v) for k, v in request.path_params.items()})
            try:   # the page polls the map and the audit log again (changed: HX-Trigger)
                return HTMLResponse(await fn(f), headers={"HX-Trigger": "minutiae-changed"})
            except Refused as exc:
                return _error(exc.code, str(exc))
            except MinutiaeError as exc:
                return _error(_code(exc), str(exc))
        return handler

    async def status_after() -> str:
        await run_in_threadpool(snap.acted)
        return pages.status_bar(snap.status_now(), True)

    async def pause(f: dict[str, str]) -> str:
        controller.pause(make_reason(f.get("reason") or "paused from the web UI"))
        return await status_after()

    async def unpause(f: dict[str, str]) -> str:
        controller.unpause()
        return await status_after()

    def on_node(act: Callable[[str, dict[str, str]], dict[str, Any]]) -> Action:
        async def run(f: dict[str, str]) -> str:
            node = validate_node(f["node"])
            out = await run_in_threadpool(act, node, f)
            ex = await run_in_threadpool(controller.explain, node)
            await run_in_threadpool(snap.acted, (node,))
            return pages.done(out) + pages.node_panel(ex, True)
        return run

    resolve = on_node(lambda n, f: controller.resolve(n, f.get("reason", ""),
                                                      now=bool(f.get("now")), by=BY))
    drain = on_node(lambda n, f: human_drain.drain(controller, n, f.get("reason", ""), by=BY))
    undo_ = on_node(lambda n, f: undo(controller, n))
    for path, fn in (("/ui/actions/pause", pause), ("/ui/actions/unpause", unpause),
                     ("/ui/actions/resolve/{node}", resolve), ("/ui/actions/drain/{node}", drain),
                     ("/ui/actions/undo/{node}", undo_)):
        r.add_api_route(path, guarded(fn), methods=["POST"], response_class=HTMLResponse)

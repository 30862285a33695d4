"""The controller's HTTP API (FastAPI; OpenAPI at ``/docs`` and ``/openapi.json``).

Agent reports, job step timings, ``pause``, ``unpause`` and ``resolve`` need ``Authorization:
Bearer <token>`` (compared in constant time). With a ``read_token`` the views that show evidence
(nodes, explain, audit) need it or the admin token; status, metrics and healthz never do.
The routes are grouped by topic, one module each: ``reports`` (the hot path's handlers too),
``jobs``, ``actions``, ``reads``, ``metrics``; ``loop`` runs the reconcile loop. ``make_app``
puts them together in this order (the order of ``/openapi.json``).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse

from minutiae import __version__
from minutiae.controller.http import actions, jobs, metrics, reads, reports, slack, ui
from minutiae.controller.http.acks import Acks
from minutiae.controller.http.agent_tokens import AgentTokens
from minutiae.controller.http.fastpath import (
    FastPath,
    Forbidden,
    Receive,
    Scope,
    Send,
    status_for,
)
from minutiae.controller.http.loop import lifespan_for
from minutiae.controller.http.metrics import Metrics
from minutiae.controller.http.models import HeartbeatIn, ReportIn
from minutiae.controller.service import Controller
from minutiae.errors import MinutiaeError

MAX_BODY = 1 << 20
__all__ = ["MAX_BODY", "ControllerApp", "bearer_auth", "make_app"]


class ControllerApp(FastAPI):
    """FastAPI behind the ingest fast path (``minutiae.controller.http.fastpath``): the hot
    endpoints are answered before the framework's middleware and routing, everything else
    (and ``lifespan``) goes to FastAPI."""

    fast: FastPath | None = None

    async def framework(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.fast is None:
            await super().__call__(scope, receive, send)
        else:
            await self.fast(scope, receive, send)


def bearer_auth(token: str, m: Metrics, *also: str) -> Callable[[Request], Awaitable[None]]:
    """The FastAPI dependency of the routes that need the token (constant-time compare);
    ``also``: other tokens accepted (the read-only token on the read views)."""
    expected = [f"Bearer {t}".encode() for t in (token, *also)]

    async def auth(request: Request) -> None:
        got = request.headers.get("authorization", "").encode()
        ok = False
        for e in expected:  # every token compared, in constant time each
            ok = hmac.compare_digest(got, e) or ok
        if not ok:
            m.refuse("token")
            raise HTTPException(401, "missing or invalid bearer token",
                                headers={"WWW-Authenticate": "Bearer"})

    return auth


def only_node(body: bytes, node: str) -> None:
    """An agent token scoped to ``node`` posts ``node``'s reports only (else 403)."""
    try:
        got = json.loads(body)
    except ValueError:
        got = None
    other = got.get("node") if isinstance(got, dict) else None
    if other != node:
        raise Forbidden(f"this token is scoped to node {node}; the report is for {other!r}")


def make_app(controller: Controller, token: str, loop_interval: float | None = None,
             read_token: str | None = None,
             agent_tokens: AgentTokens | None = None) -> ControllerApp:
    """The app. With ``loop_interval`` the reconcile loop runs in a thread for the app's life."""
    m = Metrics()
    acks = Acks(controller.committer)   # reports are answered once stored
    app = ControllerApp(title="minutiae controller", version=__version__,
                        lifespan=lifespan_for(controller, loop_interval, acks),
                        description="Fleet health reports in, safe drains/resumes out. "
                                    "See docs/controller.md.")

    @app.exception_handler(MinutiaeError)
    async def _minutiae_error(request: Request, exc: MinutiaeError) -> JSONResponse:
        m.refuse(type(exc).__name__)
        return JSONResponse({"detail": str(exc)}, status_code=status_for(exc))

    hot = reports.handlers(controller, m)
    # the hot path: token, body limit, validation and ingest without the framework's routing
    app.fast = FastPath(app.framework, token=token, max_body=MAX_BODY, handlers=hot, acks=acks,
                        refused=m.refuse, only_node=only_node,
                        scoped=agent_tokens.node_for if agent_tokens else None)
    auth = [Depends(bearer_auth(token, m))]
    for r in (reports.router(app.fast, auth), jobs.router(controller, auth),
              actions.router(controller, auth),
              reads.router(controller, [Depends(bearer_auth(token, m, read_token))]
                           if read_token else ()),
              metrics.router(controller, m), ui.router(controller, token, m.refuse, read_token),
              slack.router(controller, m.refuse)):
        app.include_router(r)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated spec plus the report and heartbeat schemas the fast path validates."""
    if app.openapi_schema is None:
        spec = get_openapi(title=app.title, version=app.version,
                           description=app.description, routes=app.routes)
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        for model in (ReportIn, HeartbeatIn):
            sch = model.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(sch.pop("$defs", {}))
            schemas[model.__name__] = sch
        app.openapi_schema = spec
    return app.openapi_schema

"""The ingest hot path as a plain ASGI layer in front of the FastAPI app.

Agent reports arrive at 2,000/s from 20,000 nodes; everything else is a trickle. Routed through
FastAPI, one report cost more in routing, dependency injection (a sync dependency hops to a
thread pool), middleware and response encoding than in the controller's own work (see
``docs/controller.md``, profile). This layer answers the hot endpoints itself with the *same*
guarantees, then hands every other request to FastAPI unchanged:

- body limit (``413``) for every request, from ``content-length`` and while reading a chunked
  body;
- bearer token compared in constant time (``401`` with ``WWW-Authenticate``);
- the handler validates (``minutiae.controller.wire``) and ingests; a ``MinutiaeError`` is a
  ``422`` naming the field (``409`` for :class:`Conflict`), never a traceback.

The FastAPI routes for the same paths stay registered, so ``/openapi.json`` and ``/docs``
still describe them (and they call the same handlers).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from minutiae.errors import AuthError, BackendError, InputError, MinutiaeError, StoreError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: a hot endpoint: the raw body in, (HTTP status, JSON-able answer) out; may raise MinutiaeError
Handler = Callable[[bytes], tuple[int, Any]]

_JSON = [(b"content-type", b"application/json")]


class Conflict(InputError):
    """The request cannot be applied to the controller's current state (HTTP 409): e.g. an
    unchanged-report heartbeat whose digest is not the node's last full report."""


class Forbidden(AuthError):
    """A valid token that may not do this (a node's agent token, another node's report)."""


def status_for(exc: MinutiaeError) -> int:
    """The HTTP status of a refused request (shared with the FastAPI exception handler)."""
    if isinstance(exc, Forbidden):
        return 403
    if isinstance(exc, AuthError):
        return 401
    if isinstance(exc, Conflict):
        return 409
    if isinstance(exc, BackendError):
        return 404
    if isinstance(exc, StoreError):
        return 503
    return 422


class FastPath:
    """ASGI middleware: ``POST`` to a path in ``handlers`` is answered here; all else goes on.

    ``refused(why)`` is called for every refusal (metrics label: ``token``, ``too_large`` or
    the error's class name)."""

    def __init__(self, app: ASGIApp, *, token: str, handlers: Mapping[str, Handler],
                 refused: Callable[[str], None], max_body: int,
                 scoped: Callable[[bytes], str | None] | None = None,
                 only_node: Callable[[bytes, str], None] | None = None) -> None:
        self.app = app
        #: a per-node agent token → its node (``agent_tokens.AgentTokens.node_for``), and the
        #: check that a body is that node's (raises ``Forbidden``)
        self.scoped, self.only_node = scoped, only_node
        self.expected = f"Bearer {token}".encode()
        self.handlers = dict(handlers)
        self.refused = refused
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        auth = b""
        length = -1
        for k, v in scope["headers"]:
            if k == b"content-length":
                length = int(v) if v.isdigit() else -1
            elif k == b"authorization":
                auth = v
        if length > self.max_body:
            self.refused("too_large")
            await _answer(send, 413, {"detail": f"body over {self.max_body} bytes"})
            return
        handler = self.handlers.get(scope["path"]) if scope["method"] == "POST" else None
        if handler is None:
            await self.app(scope, receive, send)
            return
        node = None
        if not hmac.compare_digest(auth, self.expected):
            node = self.scoped(auth) if self.scoped is not None else None
        if node is None and not hmac.compare_digest(auth, self.expected):
            self.refused("token")
            await _answer(send, 401, {"detail": "missing or invalid bearer token"},
                          [(b"www-authenticate", b"Bearer")])
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            part = msg.get("body", b"")
            size += len(part)
            if size > self.max_body:
                self.refused("too_large")
                await _answer(send, 413, {"detail": f"body over {self.max_body} bytes"})
                return
            chunks.append(part)
            more = msg.get("more_body", False)
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            if node is not None and self.only_node is not None:
                self.only_node(body, node)
            code, out = handler(body)
        except MinutiaeError as exc:
            self.refused(type(exc).__name__)
            await _answer(send, status_for(exc), {"detail": str(exc)})
            return
        await _answer(send, code, out)


async def _answer(send: Send, code: int, payload: Any,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(payload, separators=(",", ":")).encode()
    headers = [*_JSON, (b"content-length", str(len(data)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": code, "headers": headers})
    await send({"type": "http.response.body", "body": data})

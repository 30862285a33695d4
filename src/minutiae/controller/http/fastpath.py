"""The ingest hot path as a plain ASGI layer in front of the FastAPI app.

Agent reports arrive at 2,000/s from 20,000 nodes; everything else is a trickle. Routed through
FastAPI, one report cost more in routing, dependency injection (a sync dependency hops to a
thread pool), middleware and response encoding than in the controller's own work (see
``docs/controller.md``, profile). This layer answers the hot endpoints itself with the *same*
guarantees, then hands every other request to FastAPI unchanged:

- body limit (``413``) for every request, from ``content-length`` and while reading a chunked
  body; a body that does not arrive within ``body_timeout`` seconds is a ``408``;
- every JSON body (the hot ones and any ``POST``/``PUT``/``PATCH`` handed on to FastAPI) is
  checked by ``minutiae.controller.wire.check_json`` before anything parses it: too deep,
  ``NaN``/``Infinity`` or an out-of-range number is a ``422``;
- bearer token compared in constant time (``401`` with ``WWW-Authenticate``);
- the handler validates (``minutiae.controller.wire``), ingests and waits for the store; a
  ``MinutiaeError`` is a ``422`` naming the field (``409`` for :class:`Conflict`, ``503`` for
  a store that could not take the report), never a traceback.

The FastAPI routes for the same paths stay registered, so ``/openapi.json`` and ``/docs``
still describe them (and they call the same handlers).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

from minutiae.controller.wire import check_json
from minutiae.errors import AuthError, BackendError, InputError, MinutiaeError, StoreError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: a hot endpoint's work: the raw body in; (HTTP status, JSON-able answer, the ticket of the
#: store take to wait for before answering, or None) out; may raise MinutiaeError
Begin = Callable[[bytes], tuple[int, Any, "int | None"]]

_JSON = [(b"content-type", b"application/json")]
#: seconds a request body may take to arrive (a client that sends headers, then stalls)
BODY_TIMEOUT = 10.0
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
#: the answer to a wrong or missing token (the ASGI path and ``hotconn`` say the same)
BAD_TOKEN = "missing or invalid bearer token"


class Acks(Protocol):
    """Acknowledge after store (``minutiae.controller.http.acks.Acks``)."""

    def pending(self, ticket: int) -> asyncio.Future[str | None] | None: ...

    def on_stored(self, ticket: int, call: Callable[[str | None], None]) -> bool: ...

    def error(self, ticket: int) -> str | None: ...

    async def stored(self, ticket: int) -> None: ...

    def note(self, ticket: int | None, t0: float, t1: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Hot:
    """A hot endpoint: ``begin`` validates and takes the body (on the event loop, no
    ``await``); ``done(t0)`` runs once the answer is stored (metrics; ``t0``: when the body
    was read, ``time.perf_counter``)."""

    begin: Begin
    done: Callable[[float], None] | None = None


class _Refused(Exception):
    """A body that could not be read: (HTTP status, why, metrics label)."""

    def __init__(self, code: int, why: str, label: str) -> None:
        super().__init__(why)
        self.code, self.label = code, label


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

    def __init__(self, app: ASGIApp, *, token: str, handlers: Mapping[str, Hot], acks: Acks,
                 refused: Callable[[str], None], max_body: int,
                 scoped: Callable[[bytes], str | None] | None = None,
                 only_node: Callable[[bytes, str], None] | None = None,
                 body_timeout: float = BODY_TIMEOUT) -> None:
        self.app = app
        #: a per-node agent token → its node (``agent_tokens.AgentTokens.node_for``), and the
        #: check that a body is that node's (raises ``Forbidden``)
        self.scoped, self.only_node = scoped, only_node
        self.expected = f"Bearer {token}".encode()
        self.handlers = dict(handlers)
        #: the same, by raw request target (``minutiae.controller.http.hotconn`` matches it)
        self.by_target = {p.encode(): h for p, h in handlers.items()}
        self.acks = acks
        self.refused = refused
        self.max_body = max_body
        self.body_timeout = body_timeout

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
            await _answer(send, 413, {"detail": self.too_large()})
            return
        handler = self.handlers.get(scope["path"]) if scope["method"] == "POST" else None
        if handler is None:
            await self._framework(scope, receive, send)
            return
        allowed, node = self.authorize(auth)
        if not allowed:
            self.refused("token")
            await _answer(send, 401, {"detail": BAD_TOKEN},
                          [(b"www-authenticate", b"Bearer")])
            return
        try:
            body = await self._body(receive)
            t0 = time.perf_counter()
            code, out = await self.run(handler, body, node)
        except _Refused as exc:
            self.refused(exc.label)
            await _answer(send, exc.code, {"detail": str(exc)})
            return
        except _Gone:
            return
        except MinutiaeError as exc:
            self.refused(type(exc).__name__)
            await _answer(send, status_for(exc), {"detail": str(exc)})
            return
        t1 = time.perf_counter()
        await _answer(send, code, out)
        self.acks.note(None, t0, t1)

    def too_large(self) -> str:
        """The answer to a body over ``max_body`` (the ASGI path and ``hotconn`` say the same)."""
        return f"body over {self.max_body} bytes"

    def authorize(self, auth: bytes) -> tuple[bool, str | None]:
        """(whether the ``Authorization`` value may post here, the node a per-node agent
        token is scoped to — None for the admin token)."""
        if hmac.compare_digest(auth, self.expected):
            return True, None
        node = self.scoped(auth) if self.scoped is not None else None
        return node is not None, node

    def start(self, hot: Hot, body: bytes, node: str | None) -> tuple[int, Any, int | None]:
        """The checks every hot body gets, then the endpoint's work (raises MinutiaeError)."""
        check_json(body)
        if node is not None and self.only_node is not None:
            self.only_node(body, node)
        return hot.begin(body)

    async def run(self, hot: Hot, body: bytes, node: str | None) -> tuple[int, Any]:
        """:meth:`start`, then wait until what it took is stored (raises ``StoreError``)."""
        t0 = time.perf_counter()
        code, out, ticket = self.start(hot, body, node)
        if ticket is not None:
            await self.acks.stored(ticket)
            self.acks.note(ticket, t0, 0.0)
        if hot.done is not None:
            hot.done(t0)
        return code, out

    async def _framework(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Hand on to FastAPI; a JSON body is read (bounded, timed) and checked first."""
        if scope["method"] not in _WITH_BODY or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        try:
            body = await self._body(receive)
            check_json(body)
        except _Refused as exc:
            self.refused(exc.label)
            await _answer(send, exc.code, {"detail": str(exc)})
            return
        except _Gone:
            return
        except MinutiaeError as exc:
            self.refused(type(exc).__name__)
            await _answer(send, status_for(exc), {"detail": str(exc)})
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()   # after the body: wait for the disconnect, as before

        await self.app(scope, replay, send)

    async def _body(self, receive: Receive) -> bytes:
        """The whole body, at most ``max_body`` bytes, within ``body_timeout`` seconds (one
        timer for the whole body: ``asyncio.timeout``, no task per chunk as ``wait_for``)."""
        chunks: list[bytes] = []
        size = 0
        more = True
        try:
            async with asyncio.timeout(self.body_timeout):
                while more:
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        raise _Gone
                    part = msg.get("body", b"")
                    size += len(part)
                    if size > self.max_body:
                        raise _Refused(413, self.too_large(), "too_large")
                    chunks.append(part)
                    more = msg.get("more_body", False)
        except TimeoutError:
            raise _Refused(408, f"body not received within {self.body_timeout:g} s",
                           "timeout") from None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class _Gone(Exception):
    """The client went away while its body was read."""


def _is_json(scope: Scope) -> bool:
    """FastAPI parses a body as JSON when its content type says so or is missing."""
    for k, v in scope["headers"]:
        if k == b"content-type":
            return b"json" in v.lower()
    return True


async def _answer(send: Send, code: int, payload: Any,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """``payload`` as JSON (``bytes``: already encoded by the handler)."""
    data = encoded(payload)
    headers = [*_JSON, (b"content-length", str(len(data)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": code, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def encoded(payload: Any) -> bytes:
    """An answer's body: ``payload`` as compact JSON (``bytes``: already encoded)."""
    return payload if isinstance(payload, bytes) else json.dumps(
        payload, separators=(",", ":")).encode()

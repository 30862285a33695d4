"""The ingest hot path at the connection: an agent's ``POST /v1/reports`` answered from
uvicorn's httptools protocol callbacks, with no ASGI scope handling, task, ``receive``/``send``
messages or per-request timer.

Profiled under ``bench/controller/fleet20k.py`` (issue 17), a report cost ~200 µs of the
replica's CPU in uvicorn's request cycle and the ASGI fast path *before* the controller saw
it (the bare echo as much as a heartbeat's whole work); this protocol does the same checks in
the parser's callbacks:

- the request target is exactly a hot path (``FastPath.by_target``), the method ``POST``,
  nothing of this connection is still unanswered and the connection cap is not reached;
  anything else (another path, a query string, a pipelined request, an upgrade) goes to
  uvicorn unchanged and, for the hot paths, through the ASGI ``FastPath``;
- the same refusals as the ASGI fast path, from the same code (``FastPath.authorize``,
  ``FastPath.start``): ``413`` for a ``content-length`` or a (chunked) body over the limit,
  ``401`` with ``WWW-Authenticate`` for a wrong token (both answered at once, the rest of the
  body read and dropped), ``408`` (connection closed) for a body not complete within
  ``body_timeout`` seconds — a timer armed only when a body does not arrive in the same read
  as its headers —, ``422``/``409``/``403``/``503`` from the handler;
- ``Expect: 100-continue`` is answered before the body is read;
- acknowledge after store: the answer is written as the store take settles
  (``Acks.on_stored``: in the same loop callback, no extra turn of the loop), in order: while it is pending, a :class:`HotCycle` stands as uvicorn's
  current request cycle, so a request pipelined behind it waits in uvicorn's queue.
"""

from __future__ import annotations

import asyncio
import functools
import http
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from minutiae.controller.http.acks import not_stored
from minutiae.controller.http.fastpath import BAD_TOKEN, FastPath, Hot, encoded, status_for
from minutiae.errors import MinutiaeError

__all__ = ["HotCycle", "HotProtocol"]

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_STATUS = {int(c): f"HTTP/1.1 {int(c)} {c.phrase}\r\n".encode() for c in http.HTTPStatus}
_JSON = b"content-type: application/json\r\ncontent-length: "
_UNAUTHORIZED = ((b"www-authenticate", b"Bearer"),)


class _NoEvent:
    """uvicorn sets its cycle's ``message_event`` when the connection is lost; nothing waits
    on a hot request's."""

    __slots__ = ()

    def set(self) -> None:
        return None


class HotCycle:
    """One hot request of a connection, read and answered by :class:`HotProtocol`."""

    __slots__ = ("chunks", "disconnected", "hot", "keep_alive", "node", "response_complete",
                 "size", "timer")
    message_event = _NoEvent()

    def __init__(self, hot: Hot, keep_alive: bool) -> None:
        self.hot = hot
        self.keep_alive = keep_alive
        self.node: str | None = None
        self.chunks: list[bytes] = []
        self.size = 0
        self.response_complete = False
        self.disconnected = False
        self.timer: asyncio.TimerHandle | None = None


class HotProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the hot endpoints answered in its callbacks (the app
    must carry the ``FastPath`` as ``app.fast``; without it this is uvicorn's protocol)."""

    _hot: HotCycle | None = None
    _fast: FastPath | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        fast = getattr(self.app, "fast", None)
        self._fast = fast if isinstance(fast, FastPath) else None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        c, fast = self._hot, self._fast
        if c is not None and fast is not None and c.timer is None and not c.response_complete:
            c.timer = self.loop.call_later(fast.body_timeout, self._late, c)

    def on_message_begin(self) -> None:
        self._hot = None
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        if not self._take():
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        c = self._hot
        if c is None:
            super().on_body(body)
            return
        if c.response_complete:
            return
        c.size += len(body)
        fast = self._fast
        assert fast is not None
        if c.size > fast.max_body:
            c.chunks = []
            self._refuse(c, 413, fast.too_large(), "too_large")
            return
        c.chunks.append(body)

    def on_message_complete(self) -> None:
        c = self._hot
        if c is None:
            super().on_message_complete()
            return
        self._hot = None
        if c.timer is not None:
            c.timer.cancel()
            c.timer = None
        if not c.response_complete:
            self._run(c, c.chunks[0] if len(c.chunks) == 1 else b"".join(c.chunks))

    def _take(self) -> bool:
        """Whether this request is a hot one, answered here (the headers are complete)."""
        fast = self._fast
        hot = fast.by_target.get(self.url) if fast is not None else None
        if hot is None or fast is None or self.parser.get_method() != b"POST":
            return False
        prev = self.cycle
        if (prev is not None and not prev.response_complete) or self.parser.should_upgrade() \
                or (self.limit_concurrency is not None
                    and len(self.connections) >= self.limit_concurrency):
            return False
        auth, length = b"", -1
        for k, v in self.headers:
            if k == b"content-length":
                length = int(v) if v.isdigit() else -1
            elif k == b"authorization":
                auth = v
        c = HotCycle(hot, self.parser.get_http_version() != "1.0"
                     and self.parser.should_keep_alive())
        self.cycle = c  # type: ignore[assignment]
        self._hot = c
        allowed = False
        if length > fast.max_body:
            self._refuse(c, 413, fast.too_large(), "too_large")
        else:
            allowed, c.node = fast.authorize(auth)
            if not allowed:
                self._refuse(c, 401, BAD_TOKEN, "token", _UNAUTHORIZED)
        if allowed and self.expect_100_continue:
            self.transport.write(_CONTINUE)
        return True

    def _run(self, c: HotCycle, body: bytes) -> None:
        fast = self._fast
        assert fast is not None
        t0 = time.perf_counter()
        try:
            code, out, ticket = fast.start(c.hot, body, c.node)
            waits = ticket is not None and fast.acks.on_stored(
                ticket, functools.partial(self._stored, c, code, out, t0, ticket))
            err = fast.acks.error(ticket) if ticket is not None and not waits else None
            if err is not None:
                raise not_stored(err)
        except MinutiaeError as exc:
            self._refuse(c, status_for(exc), str(exc), type(exc).__name__)
            return
        except Exception:  # a bug: a 500 and its traceback in the log, as uvicorn does
            self.logger.exception("Exception in the ingest hot path")
            self._answer(c, 500, {"detail": "Internal Server Error"})
            return
        if not waits:
            self._done(c, code, out, t0)

    def _stored(self, c: HotCycle, code: int, out: Any, t0: float, ticket: int | None,
                err: str | None) -> None:
        if self._fast is not None and ticket is not None:   # latency: settled -> here
            self._fast.acks.note(ticket, t0, 0.0)
        if err is not None:
            self._refuse(c, 503, str(not_stored(err)), "StoreError")
        else:
            self._done(c, code, out, t0)

    def _done(self, c: HotCycle, code: int, out: Any, t0: float) -> None:
        if c.hot.done is not None:
            c.hot.done(t0)
        t1 = time.perf_counter()
        self._answer(c, code, out)
        if self._fast is not None:
            self._fast.acks.note(None, t0, t1)

    def _late(self, c: HotCycle) -> None:
        """The body did not arrive in time: ``408`` and the connection is closed."""
        c.timer = None
        if self._hot is c and not c.response_complete and self._fast is not None:
            c.keep_alive = False
            self._refuse(c, 408, f"body not received within {self._fast.body_timeout:g} s",
                         "timeout")

    def _refuse(self, c: HotCycle, code: int, why: str, label: str,
                extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        if self._fast is not None:
            self._fast.refused(label)
        self._answer(c, code, {"detail": why}, extra)

    def _answer(self, c: HotCycle, code: int, payload: Any,
                extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        """Write the answer (once), then uvicorn's end of a response (keep-alive timer,
        reading resumed, the next pipelined request started)."""
        if c.response_complete:
            return
        c.response_complete = True
        t = self.transport
        if c.disconnected or t.is_closing():
            return
        data = encoded(payload)
        out = [_STATUS[code], _JSON, str(len(data)).encode(), b"\r\n"]
        for name, value in (*self.server_state.default_headers, *extra):
            out += [name, b": ", value, b"\r\n"]
        if not c.keep_alive:
            out.append(b"connection: close\r\n")
        out += [b"\r\n", data]
        t.write(b"".join(out))
        if not c.keep_alive:
            t.close()
        self.on_response_complete()

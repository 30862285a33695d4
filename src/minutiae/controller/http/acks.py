"""The event loop's side of acknowledge-after-store: a request whose report must be stored
awaits the take (ticket) that stores it (``minutiae.controller.commit``), then is answered;
a take that failed, or none within ``timeout_s``, is a ``StoreError`` (HTTP 503: the agent
keeps the report and retries, or fails over to another replica).

Without a running writer thread (an app used without its lifespan) the request commits
itself, in the request: slower, the same guarantee."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from minutiae.controller.commit import Committer
from minutiae.errors import StoreError

__all__ = ["ACK_TIMEOUT_S", "Acks"]

#: a report not stored within this many seconds is answered 503 (kept in memory meanwhile)
ACK_TIMEOUT_S = 10.0
_KEEP_FAILED = 256


class Acks:
    def __init__(self, committer: Committer, timeout_s: float = ACK_TIMEOUT_S) -> None:
        self.committer = committer
        self.timeout_s = timeout_s
        self.loop: asyncio.AbstractEventLoop | None = None
        #: ticket → the futures of the requests waiting for it (one each: a request that is
        #: cancelled cancels only its own)
        self._futs: dict[int, list[asyncio.Future[str | None]]] = {}
        self._through = -1
        self._failed: OrderedDict[int, str] = OrderedDict()
        committer.listeners.append(self._done)

    def bind(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """The loop the requests run on, while a writer thread commits (None: no writer)."""
        self.loop = loop

    def _done(self, ticket: int, err: str | None) -> None:
        loop = self.loop
        if loop is None:
            self._settle(ticket, err)
        else:
            loop.call_soon_threadsafe(self._settle, ticket, err)

    def _settle(self, ticket: int, err: str | None) -> None:
        self._through = max(self._through, ticket)
        if err is not None:
            self._failed[ticket] = err
            while len(self._failed) > _KEEP_FAILED:
                self._failed.popitem(last=False)
        for t in [t for t in self._futs if t <= ticket]:
            err = self._failed.get(t)
            for fut in self._futs.pop(t):
                if not fut.done():
                    fut.set_result(err)

    async def stored(self, ticket: int) -> None:
        """Return once the take ``ticket`` is in the store; raise ``StoreError`` otherwise.
        A plain future per request (no per-request timer, task or shield: one
        ``call_later`` per take bounds the wait)."""
        if self.loop is None:
            self.committer.commit()
        if ticket <= self._through:
            err = self._failed.get(ticket)
        else:
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            waiting = self._futs.get(ticket)
            if waiting is None:
                waiting = self._futs[ticket] = []
                loop.call_later(self.timeout_s, self._expire, ticket)
                self.committer.wake.set()
            waiting.append(fut)
            err = await fut
        if err is not None:
            raise StoreError(f"report not stored ({err}); send it again")

    def _expire(self, ticket: int) -> None:
        for fut in self._futs.pop(ticket, ()):
            if not fut.done():
                fut.set_result(f"not stored within {self.timeout_s:g} s; the report is kept "
                               "in memory")

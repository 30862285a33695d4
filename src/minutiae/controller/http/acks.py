"""The event loop's side of acknowledge-after-store: a request whose report must be stored
awaits the take (ticket) that stores it (``minutiae.controller.commit``), then is answered;
a take that failed, or none within ``timeout_s``, is a ``StoreError`` (HTTP 503: the agent
keeps the report and retries, or fails over to another replica).

Without a running writer thread (an app used without its lifespan) the request commits
itself, in the request: slower, the same guarantee."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from minutiae.controller.commit import Committer
from minutiae.errors import StoreError

__all__ = ["ACK_TIMEOUT_S", "Acks", "not_stored"]

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
        self._futs: dict[int, list[_Waiter]] = {}
        self._through = -1
        self._failed: OrderedDict[int, str] = OrderedDict()
        #: when each waiting request registered (perf_counter), beside ``_futs``
        self._since: dict[int, list[float]] = {}
        #: when each recent take was settled on the loop (a request's ``resume`` part)
        self.settled: OrderedDict[int, float] = OrderedDict()
        self.parts = committer.parts
        committer.listeners.append(self._done)

    def bind(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """The loop the requests run on, while a writer thread commits (None: no writer)."""
        self.loop = loop

    def _done(self, ticket: int, err: str | None) -> None:
        loop = self.loop
        when = self.committer.last
        if loop is None:
            self._settle(ticket, err, when)
        else:
            loop.call_soon_threadsafe(self._settle, ticket, err, when)

    def _parts(self, ticket: int, when: tuple[float, float, float, float]) -> None:
        """Each settled request's queue / linger / write / handoff parts (latency)."""
        now = time.perf_counter()
        t_take, linger, w0, w1 = when
        self.settled[ticket] = now
        while len(self.settled) > _KEEP_FAILED:
            self.settled.popitem(last=False)
        add = self.parts.add
        for t in [t for t in self._since if t <= ticket]:
            for a in self._since.pop(t):
                before = max(t_take - a, 0.0)
                mine = min(before, linger)
                add("queue", before - mine)
                add("linger", mine)
                add("write", w1 - t_take)
                add("handoff", now - w1)

    def _settle(self, ticket: int, err: str | None,
                when: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)) -> None:
        self._parts(ticket, when)
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

    def pending(self, ticket: int) -> asyncio.Future[str | None] | None:
        """The future a request waits on until the take ``ticket`` is stored (its result: the
        error, or None); None when that take is already settled (:meth:`error` says how).
        A plain future per request (no timer, task or shield: one ``call_later`` per take
        bounds the wait); callable from a coroutine or from a protocol callback on the loop."""
        if self.loop is None:
            self.committer.commit()
        if ticket <= self._through:
            return None
        loop = self.loop or asyncio.get_running_loop()
        fut: asyncio.Future[str | None] = loop.create_future()
        self._wait(ticket, fut, loop)
        return fut

    def on_stored(self, ticket: int, call: Callable[[str | None], None]) -> bool:
        """Like :meth:`pending`, for a protocol callback on the loop: ``call(error or
        None)`` runs as the take ``ticket`` settles (or expires); False when it is already
        settled (:meth:`error` says how) and ``call`` will not run."""
        if self.loop is None:
            self.committer.commit()
        if ticket <= self._through:
            return False
        self._wait(ticket, _Call(call), self.loop or asyncio.get_running_loop())
        return True

    def _wait(self, ticket: int, fut: _Waiter, loop: asyncio.AbstractEventLoop) -> None:
        waiting = self._futs.get(ticket)
        if waiting is None:
            waiting = self._futs[ticket] = []
            loop.call_later(self.timeout_s, self._expire, ticket)
            self.committer.wake.set()
        waiting.append(fut)
        self._since.setdefault(ticket, []).append(time.perf_counter())

    def error(self, ticket: int) -> str | None:
        """Why the settled take ``ticket`` was not stored (None: it was)."""
        return self._failed.get(ticket)

    async def stored(self, ticket: int) -> None:
        """Return once the take ``ticket`` is in the store; raise ``StoreError`` otherwise."""
        fut = self.pending(ticket)
        err = self.error(ticket) if fut is None else await fut
        if err is not None:
            raise not_stored(err)

    def note(self, ticket: int | None, t0: float, t1: float) -> None:
        """A request's own parts (latency): with ``ticket``, it runs again once stored
        (``resume``); without, its answer was sent (``send`` from ``t1``, ``server`` from
        ``t0``, when its body was read)."""
        now = time.perf_counter()
        if ticket is not None:
            at = self.settled.get(ticket)
            if at is not None:
                self.parts.add("resume", now - at)
        else:
            self.parts.add("send", now - t1)
            self.parts.add("server", now - t0)

    def _expire(self, ticket: int) -> None:
        self._since.pop(ticket, None)
        for fut in self._futs.pop(ticket, ()):
            if not fut.done():
                fut.set_result(f"not stored within {self.timeout_s:g} s; the report is kept "
                               "in memory")


class _Waiter(Protocol):
    def done(self) -> bool: ...

    def set_result(self, result: str | None, /) -> None: ...


class _Call:
    """A waiter whose callback runs as its take settles, in the same loop callback (a
    future's done-callbacks wait one more turn of the loop, behind every request read
    meanwhile: the ``resume`` part of the latency, tens of ms at its p99 on a busy core)."""

    __slots__ = ("call", "fired")

    def __init__(self, call: Callable[[str | None], None]) -> None:
        self.call = call
        self.fired = False

    def done(self) -> bool:
        return self.fired

    def set_result(self, result: str | None, /) -> None:
        self.fired = True
        self.call(result)


def not_stored(err: str) -> StoreError:
    """The refusal (HTTP 503) of a report whose take was not stored."""
    return StoreError(f"report not stored ({err}); send it again")

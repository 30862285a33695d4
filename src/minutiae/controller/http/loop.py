"""The reconcile loop thread, the report writer thread (acknowledge after store) and the
app's lifespan that runs them."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from minutiae.controller.http.acks import Acks
from minutiae.controller.service import Controller

MIN_GAP_S = 0.05
GC_FULL_S = 900.0


def run_loop(controller: Controller, loop_interval: float, stop: threading.Event) -> None:
    """Step every ``loop_interval`` s, or as soon as a report changes a node's picture;
    woken steps are at least ``MIN_GAP_S`` apart so a burst of reports is one step."""
    gap = min(MIN_GAP_S, loop_interval)
    last_full = time.monotonic()
    while not stop.is_set():
        t0 = time.monotonic()
        controller.wake.wait(loop_interval)
        if stop.is_set():
            break
        rest = gap - (time.monotonic() - t0)
        if rest > 0:
            stop.wait(rest)
        controller.wake.clear()
        t1 = time.perf_counter()
        try:
            controller.step()
            controller.committer.parts.add("step", time.perf_counter() - t1)
        except Exception as exc:  # keep the loop alive; say what failed
            controller.problem(f"reconcile step failed: {type(exc).__name__}: {exc}")
        # The fleet's long-lived objects (20,000 reports and views) leave the cyclic GC's
        # generations after each step: full collections over them paused every request
        # for 0.1-0.3 s, a few times a minute at 2,000 reports/s (the p99 tail). Objects
        # are still freed by reference counting; reference cycles are reclaimed by one
        # full collection every GC_FULL_S.
        if time.monotonic() - last_full >= GC_FULL_S:
            gc.unfreeze()
            gc.collect()
            last_full = time.monotonic()
        gc.freeze()


def lifespan_for(controller: Controller, loop_interval: float | None, acks: Acks
                 ) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the report writer thread (reports are answered once it stored
    them), and with ``loop_interval`` the pending actions retried and the reconcile loop in a
    thread, for the app's life."""
    stop = threading.Event()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        t = None
        w = threading.Thread(target=controller.committer.run, args=(stop,),
                             name="minutiae-report-writer", daemon=True)
        acks.bind(asyncio.get_running_loop())
        controller.committer.parts.watch_gc()   # GC pauses beside the latency parts
        w.start()
        if loop_interval is not None:
            controller.retry_pending()
            t = threading.Thread(target=run_loop, args=(controller, loop_interval, stop),
                                 name="minutiae-reconcile", daemon=True)
            t.start()
        yield
        stop.set()
        controller.wake.set()
        controller.committer.wake.set()
        for th in (t, w):
            if th is not None:
                th.join(timeout=10)
        acks.bind(None)
        controller.committer.commit()   # what came in last is stored before we exit

    return lifespan

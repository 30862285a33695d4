"""Where a report's latency goes (issue 17: the p99, not the mean): bounded samples of each
part of an acknowledged report's time in the replica, and of the pauses that stop every
request at once (the cyclic GC's collections: ``gc2`` the full ones, ``gc`` the
others; the reconcile thread's steps, wall time).

Parts of one report, in order (seconds): ``queue`` (waiting for the writer while it stored
an earlier take), ``linger`` (the writer's deliberate wait, ``commit.LINGER_S``), ``write``
(the store transaction that holds it), ``handoff`` (from the write's end until the event
loop settled its waiter: the loop busy, or the GIL held elsewhere), ``resume`` (settled until
its request ran again), ``send`` (writing the answer); ``server`` is the whole, from the body
read to the answer sent. :meth:`Parts.take` hands the samples since the last take over as
p50 / p99 / max in ms (``/v1/status``: the samples since the previous status read).
"""

from __future__ import annotations

import gc
import threading
import time
from collections import deque
from typing import Any

__all__ = ["PARTS", "Parts"]

PARTS = ("queue", "linger", "write", "handoff", "resume", "send", "server", "gc", "gc2",
         "step")
#: samples kept per part between takes (~12,000 a part in a 6 s benchmark run at
#: 2,000 reports/s); beyond it the oldest go: bounded memory (~1 MB a part)
_KEEP = 25_000


def _pct(xs: list[float], p: float) -> float:
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


class Parts:
    """Samples per part, each bounded (appends from any thread: a deque's are atomic)."""

    def __init__(self) -> None:
        self.samples: dict[str, deque[float]] = {p: deque(maxlen=_KEEP) for p in PARTS}
        self._gc_t0 = 0.0
        self._lock = threading.Lock()

    def add(self, part: str, seconds: float) -> None:
        self.samples[part].append(seconds)

    def watch_gc(self) -> None:
        """Time every cyclic-GC collection of this process (``gc.callbacks``)."""
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            part = "gc2" if info.get("generation") == 2 else "gc"
            self.samples[part].append(time.perf_counter() - self._gc_t0)

    def take(self) -> dict[str, dict[str, float]]:
        """p50 / p99 / max (ms) and the count of each part since the last take."""
        out: dict[str, dict[str, float]] = {}
        with self._lock:
            for part, q in self.samples.items():
                xs = []
                while q:
                    xs.append(q.popleft())
                if not xs:
                    continue
                xs.sort()
                out[part] = {"n": len(xs), "p50_ms": round(1e3 * _pct(xs, 50), 3),
                             "p99_ms": round(1e3 * _pct(xs, 99), 3),
                             "max_ms": round(1e3 * xs[-1], 3),
                             "sum_ms": round(1e3 * sum(xs), 1)}
        return out

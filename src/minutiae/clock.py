"""Time is injected: everything that needs "now" takes a ``Clock``.

``SystemClock`` is the only place in the package that reads the real clock. ``ManualClock`` is
the clock production code drives itself (a replay over recorded time, a rule's examples);
``minutiae.testing.FakeClock`` is the recording fake for tests.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock time, epoch seconds."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds, for measuring durations."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class ManualClock:
    """A clock standing at ``t`` that moves only by ``sleep`` or by setting ``t``: how pure code
    evaluates time-based rules at a given instant (a check cycle, a rule's example sequence)."""

    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def advance(self, seconds: float) -> None:
        """Move the clock on by ``seconds`` (a replay stepping through recorded time)."""
        self.t += seconds

"""Recording fakes for the seams (clock here; backends and GPU API live beside their protocols)."""

from __future__ import annotations


class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it and is recorded."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._mono = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._now += seconds
        self._mono += seconds

"""Follows the kernel log between check cycles: new lines go through the same kernel-log
parser and rules; a finding that needs an action or raises the verdict (WARNING or worse) wakes
the agent loop at once (``/dev/kmsg``: woken by ``select`` on the record itself; a file: one
``stat`` every ``poll_s``, 0.2 s), so the full report (read again through the check's cursor) is pushed
within a fraction of a second instead of at the next interval.

A burst is one push: the loop waits ``debounce_s`` after the first wake before it runs the
check. The follower parses at most ``max_bytes_per_poll`` per poll (a line-rate cap on a flood);
the bytes beyond it are counted in ``skipped_bytes`` and still read by the interval check."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from minutiae.agent.metrics import AgentMetrics
from minutiae.errors import MinutiaeError
from minutiae.model import Action, Severity
from minutiae.node.sources.kernel_log.read_stream import KernelLogTail

__all__ = ["KernelLogFollower"]


class KernelLogFollower:
    def __init__(self, path: str | Path, wake: threading.Event, *, poll_s: float = 0.2,
                 max_bytes_per_poll: int = 1 << 16, year: int | None = None,
                 log: Callable[[str], None] | None = None,
                 metrics: AgentMetrics | None = None) -> None:
        self.tail = KernelLogTail(path)  # SourceUnavailable: the caller says so
        self.wake = wake
        self.poll_s = poll_s
        self.max_bytes = max_bytes_per_poll
        self.year = year
        self.log = log or (lambda s: None)
        self.metrics = metrics
        self.triggers = 0
        self.lines = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def skipped_bytes(self) -> int:
        return self.tail.skipped_bytes

    def step(self) -> bool:
        """One poll: True when the new lines hold a finding worth an immediate report."""
        data = self.tail.poll(self.max_bytes)
        if self.metrics is not None:
            self.metrics.follow_skipped.set(self.tail.skipped_bytes)
        if not data:
            return False
        self.lines += data.count(b"\n")
        from minutiae.node.sources.kernel_log.scan import scan_chunks

        try:
            urgent = any(f.action > Action.NONE or f.severity >= Severity.WARNING
                         for f in scan_chunks([data], year=self.year))
        except MinutiaeError as exc:
            self.log(f"kernel-log follow: {exc}")
            return False
        if urgent:
            self.triggers += 1
            self.wake.set()
        return urgent

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.tail.waits_for_data:  # /dev/kmsg: select, woken by the record itself
                self.tail.wait(1.0)
            else:  # a file: a stat every poll_s
                self._stop.wait(self.poll_s)
            if self._stop.is_set():
                return
            try:
                self.step()
            except Exception as exc:  # the interval check still runs: say so, keep following
                self.log(f"kernel-log follow: {type(exc).__name__}: {exc}")

    def start(self) -> KernelLogFollower:
        self._thread = threading.Thread(target=self._loop, name="kmsg-follow", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.tail.close()

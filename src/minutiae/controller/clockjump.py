"""Wall-clock jumps (an NTP step, a VM resumed from a snapshot, a hand-set date).

The controller dates reports and remembers times by the wall clock (they are stored and shared
between replicas); leadership and fencing never use it (monotonic clocks and the database's
``now()``), so a jump cannot let a deposed leader act. What a jump could do instead:

- backwards: every new report would look older than the one kept and be ignored (blind), and
  kept reports would look fresh for as long as the jump;
- forwards: every report would look stale at once, and a healthy delay or a rung timeout
  would seem to have passed.

Each report and each step compares how far the wall clock moved with how far the monotonic
clock moved; more than ``TOLERANCE_S`` apart is a jump. Then: the kept reports are re-dated by
the jump at once (their ages stay true; a report arriving just after a jump back is not taken
for an old one), every healthy delay and rung timer starts over (nothing is resumed or
escalated on a span of time that did not pass), the step acts on nothing, and the jump is said
in ``problems`` and the JSON log.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from minutiae.clock import Clock
from minutiae.controller.ha.replicas import fenced_batch
from minutiae.controller.state import ControllerMemory, Plan

if TYPE_CHECKING:
    from minutiae.controller.service import Controller

__all__ = ["TOLERANCE_S", "WallJumps", "after_jump", "handle_jump"]

#: wall and monotonic clocks may drift apart this much between two steps (NTP slews slowly)
TOLERANCE_S = 2.0


class WallJumps:
    """The wall clock, looked at together with the monotonic clock at every use (each report
    and each step), so a jump is seen at the first report after it (thread-safe)."""

    def __init__(self, clock: Clock, tolerance_s: float = TOLERANCE_S) -> None:
        self.clock = clock
        self.tolerance_s = tolerance_s
        self._mu = threading.Lock()
        self._last: tuple[float, float] | None = None
        self._unsaid = 0.0

    def now(self) -> tuple[float, float]:
        """(the wall clock's time, the jump seen since the last look: + forwards, or 0.0)."""
        with self._mu:
            mono0 = self.clock.monotonic()
            wall, mono = self.clock.now(), self.clock.monotonic()
            if mono - mono0 > 0.1:   # descheduled between the reads: no verdict this time
                return wall, 0.0
            last, self._last = self._last, (wall, mono)
            skew = 0.0 if last is None else (wall - last[0]) - (mono - last[1])
            if abs(skew) <= self.tolerance_s:
                return wall, 0.0
            self._unsaid += skew
            return wall, skew

    def take(self) -> float:
        """The jumps seen since the last ``take`` (for the step to act on)."""
        with self._mu:
            out, self._unsaid = self._unsaid, 0.0
            return out


def after_jump(memory: ControllerMemory, now: float) -> ControllerMemory:
    """Healthy delays and rung timers start over at ``now`` (pure)."""
    return replace(memory, nodes={
        n: replace(m, healthy_since=None,
                   step_since=now if m.step is not None else m.step_since)
        for n, m in memory.nodes.items()})


def handle_jump(ctl: Controller, jump: float, now: float, leading: bool) -> None:
    """What a step does after a jump (the reports were re-dated when it was seen: see
    ``Controller.wall_now``); it then acts on nothing."""
    ctl.problem(f"wall clock jumped {jump:+.1f} s (the monotonic clock disagrees): reports "
                "re-dated, healthy delays and rung timers restarted, nothing acted on this "
                "step")
    if not leading:
        return
    with ctl._mem_lock:
        before = ctl.memory
        after = after_jump(before, now)
        if fenced_batch(ctl.store, ctl.leadership, Plan((), after, (), ctl.dry_run), before,
                        ctl.dry_run, ctl.problem) is not None:
            ctl.memory = after

"""Structured logs of what ``serve`` decides and does: one JSON line per decision (who — this
controller's identity —, what — node, action, wanted —, why — rule and evidence —, the budget's
verdict, dry-run or not) and one per problem (a failed action, an unreachable scheduler, a
standby, a retry given up). Written to a stream (stderr under ``serve``; journald keeps it) as
JSON Lines, so ``journalctl -u minutiae-controller -o cat | jq`` reads them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import IO

from minutiae.clock import Clock
from minutiae.controller.state import Decision

__all__ = ["JsonLog"]


class JsonLog:
    """A ``Notifier`` (decisions and alerts) that is also a problem hook."""

    def __init__(self, stream: IO[str], identity: str, clock: Clock, *, dry_run: bool) -> None:
        self.stream, self.identity, self.clock, self.dry_run = stream, identity, clock, dry_run
        self._lock = threading.Lock()

    def _write(self, doc: dict[str, object]) -> None:
        line = json.dumps({"time": round(self.clock.now(), 3), "who": self.identity, **doc},
                          sort_keys=False, default=str)
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()

    def notify(self, decisions: Sequence[Decision], alerts: Sequence[str] = ()) -> None:
        for d in decisions:
            self._write({"event": "decision", "node": d.node, "action": d.action.value,
                         "wanted": d.wanted.value if d.wanted else None, "rule": d.rule,
                         "why": list(d.evidence), "budget": d.budget.to_json(),
                         "step": d.step.label if d.step else None, "reason": d.reason or None,
                         "dry_run": self.dry_run, "undo": d.undo})
        for a in alerts:
            self._write({"event": "alert", "what": a})

    def problem(self, text: str) -> None:
        self._write({"event": "problem", "what": text})

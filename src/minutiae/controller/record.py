"""Recording the reports the controller receives, for ``minutiae backtest`` (``reports.jsonl``).

``minutiae serve`` with ``MINUTIAE_RECORD=DIR`` appends accepted agent reports to
``DIR/reports.jsonl`` in the wire format, stamped with the time the controller gave them. To keep
the file small at fleet scale it writes a node's report when it differs from the last one
written for that node (status or findings), and otherwise once every ``heartbeat_s`` seconds —
often enough that a replay sees the node alive exactly while it reported (a node is stale after
``stale_after_s``, 120 s by default, and the heartbeat is 60 s). Recording never raises into
ingest: a write error is logged once and recording stops.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from minutiae.controller.state import Report

log = logging.getLogger("minutiae.record")
#: a node's report is written at least this often while it reports (and on every change)
RECORD_HEARTBEAT_S = 60.0


def _signature(rep: Report) -> tuple[object, ...]:
    return (rep.status, rep.unknown,
            tuple(sorted((f.kind, f.code, f.pci or f.component or "", f.severity, f.action)
                         for f in rep.findings)))


class ReportRecorder:
    """Appends reports to ``directory/reports.jsonl`` (see the module docstring)."""

    def __init__(self, directory: str | Path, heartbeat_s: float = RECORD_HEARTBEAT_S) -> None:
        self.path = Path(directory) / "reports.jsonl"
        self.heartbeat_s = heartbeat_s
        self.written = 0
        self._last: dict[str, tuple[float, tuple[object, ...]]] = {}
        self._lock = threading.Lock()
        self._fh: IO[str] | None = None
        self._broken = False

    def record(self, rep: Report, body: Mapping[str, Any]) -> bool:
        """Write ``body`` (as received) for ``rep`` if it is news; returns whether it was written."""
        sig = _signature(rep)
        with self._lock:
            if self._broken:
                return False
            last = self._last.get(rep.node)
            if last is not None and last[1] == sig and rep.time - last[0] < self.heartbeat_s:
                return False
            doc = {k: v for k, v in body.items() if k != "agent"}  # age already in rep.time
            doc["time"] = rep.time
            try:
                if self._fh is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._fh = self.path.open("a", encoding="utf-8")
                self._fh.write(json.dumps(doc, separators=(",", ":"), default=str) + "\n")
                self._fh.flush()
            except OSError as exc:
                log.error("recording reports to %s failed, recording stops: %s", self.path, exc)
                self._broken = True
                return False
            self._last[rep.node] = (rep.time, sig)
            self.written += 1
            return True

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

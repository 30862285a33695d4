"""Where StepTimer rows go: a local CSV file (appended) or an HTTP endpoint (fire-and-forget).

Standard library only. A row is ``(step, section, seconds, time, calls)``; sinks add the rank's
``rank,node,gpu,stage`` and write the DESIGN.md columns
``step,rank,seconds,node,gpu,stage,section,time`` plus ``calls`` (``section`` empty for the
step total; ``calls``: how many times the section ran in the step, empty on the step row).

HTTP payload (POST, ``Content-Type: application/json``)::

    {"columns": ["step","rank","seconds","node","gpu","stage","section","time","calls"],
     "rows": [[100, 3, 1.2345, "gpu117", 3, 0, "", 1767225600.5, null], ...]}

Both sinks format and write/post from a daemon thread; the training loop only hands over a
list. When the disk or the receiver is slow or down, batches beyond ``max_pending`` are dropped
(``dropped`` counts rows) rather than blocking the step or growing without bound.
"""

from __future__ import annotations

import json
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

Row = tuple[int, str, float, float, int]
COLUMNS = ("step", "rank", "seconds", "node", "gpu", "stage", "section", "time", "calls")


class Sink(Protocol):
    def write(self, rows: list[Row]) -> None: ...

    def close(self) -> None: ...


class Identity:
    """Who is timing: the same for every row of one process."""

    __slots__ = ("gpu", "node", "rank", "stage")

    def __init__(self, rank: int, node: str, gpu: int | None, stage: int | str | None) -> None:
        self.rank, self.node, self.gpu, self.stage = rank, node, gpu, stage


def _cell(v: object) -> str:
    if v is None:
        return ""
    text = str(v)
    return f'"{text.replace(chr(34), chr(34) * 2)}"' if any(c in text for c in ',"\n') else text


class _Background:
    """A daemon thread that hands queued batches to ``handle``; ``put`` never blocks: batches
    beyond ``max_pending`` are dropped and counted."""

    def __init__(self, handle: Callable[[list[Row]], None], name: str, max_pending: int) -> None:
        self.dropped = 0
        self._handle = handle
        self._q: queue.Queue[list[Row] | None] = queue.Queue(maxsize=max_pending)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, rows: list[Row]) -> None:
        try:
            self._q.put_nowait(rows)
        except queue.Full:
            self.dropped += len(rows)

    def _run(self) -> None:
        while True:
            rows = self._q.get()
            if rows is None:
                return
            self._handle(rows)

    def stop(self, wait: float) -> None:
        try:
            self._q.put(None, timeout=wait)
        except queue.Full:
            return
        self._thread.join(wait)


class CsvSink:
    """Appends rows to ``path`` (header written when the file is new or empty); formatting and
    writing happen on a background thread."""

    def __init__(self, path: str | Path, who: Identity, max_pending: int = 256) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fixed = ",".join(_cell(v) for v in (who.node, who.gpu, who.stage))
        self._rank = str(who.rank)
        self._f = self.path.open("a", encoding="utf-8")
        if self._f.tell() == 0:
            self._f.write(",".join(COLUMNS) + "\n")
            self._f.flush()
        self._bg = _Background(self._write, "minutiae-timing-csv", max_pending)

    @property
    def dropped(self) -> int:
        return self._bg.dropped

    def write(self, rows: list[Row]) -> None:
        self._bg.put(rows)

    def _write(self, rows: list[Row]) -> None:
        rank, fixed = self._rank, self._fixed
        self._f.write("".join(
            f"{step},{rank},{secs:.9g},{fixed},{_cell(name)},{t:.6f},\n" if t else
            f"{step},{rank},{secs:.9g},{fixed},{_cell(name)},,{calls or ''}\n"
            for step, name, secs, t, calls in rows))
        self._f.flush()

    def close(self, wait: float = 5.0) -> None:
        self._bg.stop(wait)
        self._f.close()


class HttpSink:
    """POSTs batches to ``url`` from a background thread; never blocks the caller."""

    def __init__(self, url: str, who: Identity, timeout: float = 2.0, max_pending: int = 64) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"timing URL must be http(s): {url!r}")
        self.url, self.who, self.timeout = url, who, timeout
        self.sent = 0
        self.errors = 0
        self._failed = 0
        self._bg = _Background(self._post, "minutiae-timing-http", max_pending)

    @property
    def dropped(self) -> int:
        return self._bg.dropped + self._failed

    def write(self, rows: list[Row]) -> None:
        self._bg.put(rows)

    def _payload(self, rows: list[Row]) -> bytes:
        w = self.who
        return json.dumps({"columns": list(COLUMNS), "rows": [
            [step, w.rank, secs, w.node, w.gpu, w.stage, name, t or None, calls or None]
            for step, name, secs, t, calls in rows]}).encode()

    def _post(self, rows: list[Row]) -> None:
        req = urllib.request.Request(self.url, data=self._payload(rows), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                resp.read()
            self.sent += len(rows)
        except (urllib.error.URLError, OSError, ValueError):
            self.errors += 1
            self._failed += len(rows)

    def close(self, wait: float = 5.0) -> None:
        self._bg.stop(wait)

"""The per-node agent loop: run the node checks on an interval (injected clock), update the
metrics, push to the controller, keep state across restarts (the checks' state file, the
outbox and the report sequence number live in ``state_dir``)."""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from minutiae import __version__
from minutiae.agent.metrics import AgentMetrics
from minutiae.agent.push import RUN_ID, Outbox, Pusher, PushResult
from minutiae.clock import Clock


class ReportLike(Protocol):
    def to_json(self) -> dict[str, Any]: ...


CheckFn = Callable[[], ReportLike]


@dataclass
class AgentConfig:
    node: str
    interval_s: float = 10.0
    state_dir: Path | None = None
    domains: Mapping[str, str] = field(default_factory=dict)
    outbox_limit: int = 360
    #: after a follow wake-up, wait this long so one burst of kernel lines is one push
    debounce_s: float = 0.05


class Agent:
    def __init__(self, cfg: AgentConfig, check: CheckFn, clock: Clock,
                 pusher: Pusher | None = None, metrics: AgentMetrics | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg
        self.check = check
        self.clock = clock
        self.pusher = pusher
        self.metrics = metrics or AgentMetrics()
        self.log = log or (lambda s: print(f"minutiae agent: {s}", file=sys.stderr, flush=True))
        sd = cfg.state_dir
        self.outbox = Outbox(sd / "outbox.jsonl" if sd else None, cfg.outbox_limit)
        self.seq = 0
        self.last_push: PushResult | None = None
        if sd is not None:
            sd.mkdir(parents=True, exist_ok=True)
            note = self.outbox.load()
            if note:
                self.log(note)
            try:
                self.seq = int(json.loads((sd / "agent.json").read_text("utf-8"))["seq"])
            except FileNotFoundError:
                pass
            except (OSError, ValueError, KeyError, TypeError) as exc:
                self.log(f"{sd / 'agent.json'}: unreadable, sequence restarts ({exc})")
        self.metrics.buffered.set(len(self.outbox.items))

    def run_once(self) -> dict[str, Any]:
        """One cycle: check, metrics, push. Never raises for the controller being away."""
        t0 = self.clock.monotonic()
        body = dict(self.check().to_json())
        took = self.clock.monotonic() - t0
        now = self.clock.now()
        self.seq += 1
        body["node"] = self.cfg.node
        body["domains"] = dict(self.cfg.domains)
        # id: the report's idempotency key (kept through the outbox and every retry, so the
        # controller answers a replay without storing it twice)
        # mono/run: the age is measured on the monotonic clock while this process runs (a
        # wall clock that jumps does not age the report; after a restart: the wall clock)
        body["agent"] = {"version": __version__, "seq": self.seq, "created": now,
                         "id": uuid.uuid4().hex, "mono": self.clock.monotonic(), "run": RUN_ID}
        body.pop("observations", None)
        self.metrics.observe(body, took, now)
        if self.pusher is not None:
            self.outbox.add(body)
            res = self.pusher.flush(self.outbox)
            self.last_push = res
            if res.sent:
                self.metrics.push.labels("ok").inc(res.sent)
            if res.dropped:
                self.metrics.push.labels("rejected").inc(res.dropped)
                self.log(f"controller refused {res.dropped} report(s) as invalid; dropped")
            if res.failed:
                self.metrics.push.labels("failed").inc()
                self.log(res.error or "push failed")
            self.metrics.buffered.set(len(self.outbox.items))
        self._save()
        return body

    def _save(self) -> None:
        sd = self.cfg.state_dir
        if sd is None:
            return
        notes = [self.outbox.save()]
        try:
            tmp = sd / "agent.json.tmp"
            tmp.write_text(json.dumps({"seq": self.seq}), "utf-8")
            os.replace(tmp, sd / "agent.json")
        except OSError as exc:
            notes.append(f"{sd / 'agent.json'}: cannot save ({exc.strerror or exc})")
        for n in notes:
            if n:
                self.log(n)

    def run(self, cycles: int | None = None, stop: Callable[[], bool] | None = None,
            wake: threading.Event | None = None) -> None:
        """Run ``cycles`` cycles (forever when None), one every ``interval_s``; when ``wake``
        is set (the kernel-log follower), one extra cycle at once (after ``debounce_s``), the
        interval schedule unchanged."""
        done = 0
        next_at = self.clock.monotonic()
        while cycles is None or done < cycles:
            if stop is not None and stop():
                return
            try:
                self.run_once()
            except Exception as exc:  # a broken check must not kill the daemon: say so
                self.log(f"check cycle failed: {type(exc).__name__}: {exc}")
                self.metrics.node_status.set(3)
            done += 1
            if cycles is not None and done >= cycles:
                return
            if not self._wait(next_at, wake):
                next_at += self.cfg.interval_s
                if next_at < self.clock.monotonic():
                    next_at = self.clock.monotonic()

    def _wait(self, next_at: float, wake: threading.Event | None) -> bool:
        """Sleep until the next interval cycle; True when the follower woke us first."""
        nxt = next_at + self.cfg.interval_s
        wait = max(0.0, nxt - self.clock.monotonic())
        if wake is None:
            self.clock.sleep(wait)
            return False
        if not wake.wait(wait):
            return False
        self.clock.sleep(self.cfg.debounce_s)  # the rest of the burst joins this push
        wake.clear()
        self.metrics.follow_wakes.inc()
        return True

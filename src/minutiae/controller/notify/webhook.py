"""Delivery of notifications over HTTP, and the generic JSON webhook notifier.

``Outbox`` + ``Poster`` give every notifier the same guarantees: posting never raises and never
blocks remediation for long (short timeouts, a time budget per flush, the first transport
failure ends the flush), and nothing is lost to a brief outage — failed posts wait in a bounded
outbox (optionally a JSON file that survives restarts) and are retried with exponential backoff
(``Retry-After`` honoured) on every later ``notify``/``flush``, up to ``max_attempts``.
Permanent refusals (4xx other than 408/429, e.g. Slack's ``invalid_payload``) are not retried;
they and exhausted messages go to ``dead`` with the reason, and are logged.

``WebhookNotifier`` posts one JSON document per reconcile step::

    {"source": "minutiae", "time": <epoch s>, "alerts": [...], "decisions": [Decision.to_json()...]}

with an ``X-Minutiae-Signature: sha256=<hex HMAC of the body>`` header when a secret is set.
Registered as ``webhook`` (``MINUTIAE_WEBHOOK_URL``, ``MINUTIAE_WEBHOOK_SECRET``) in ``NOTIFIERS``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from minutiae.clock import Clock
from minutiae.controller.notify.base import Notifier, NotifyContext
from minutiae.controller.state import Decision

log = logging.getLogger("minutiae.notify")


@dataclass
class Pending:
    """One message waiting to be posted: ``attempts`` so far, not before ``next_at``."""

    url: str
    payload: dict[str, Any]
    attempts: int = 0
    next_at: float = 0.0
    last_error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "payload": self.payload, "attempts": self.attempts,
                "next_at": self.next_at, "last_error": self.last_error}


@dataclass
class Outbox:
    """FIFO of pending messages, at most ``max_items`` (the oldest is dropped beyond, counted in
    ``dropped``). With ``path`` it is mirrored to a JSON file (atomic replace) and reloaded."""

    path: Path | None = None
    max_items: int = 1000
    items: list[Pending] = field(default_factory=list)
    dropped: int = 0

    def __post_init__(self) -> None:
        if self.path is not None and self.path.exists():
            try:
                raw = json.loads(self.path.read_text("utf-8"))
                self.items = [Pending(str(p["url"]), dict(p["payload"]), int(p["attempts"]),
                                      float(p["next_at"]), str(p.get("last_error", "")))
                              for p in raw]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.error("notify outbox %s unreadable (%s); starting empty", self.path, exc)
                self.items = []

    def add(self, p: Pending) -> None:
        self.items.append(p)
        while len(self.items) > self.max_items:
            self.items.pop(0)
            self.dropped += 1

    def save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        try:
            tmp.write_text(json.dumps([p.to_json() for p in self.items]), "utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            log.error("notify outbox %s not saved: %s", self.path, exc)

    def __len__(self) -> int:
        return len(self.items)


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return max(0.0, float(resp.headers.get("Retry-After", "")))
    except ValueError:
        return None


@dataclass
class Poster:
    """Posts JSON through the outbox (see the module docstring)."""

    clock: Clock
    outbox: Outbox = field(default_factory=Outbox)
    timeout: float = 3.0
    flush_budget_s: float = 5.0
    max_attempts: int = 8
    backoff_s: float = 2.0
    backoff_cap_s: float = 300.0
    secret: str | None = None
    transport: httpx.BaseTransport | None = None
    sent: int = 0
    dead: list[Pending] = field(default_factory=list)
    _http: httpx.Client | None = field(default=None, repr=False)

    def _client(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(timeout=self.timeout, transport=self.transport,
                                      headers={"User-Agent": "minutiae"})
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def post(self, url: str, payloads: Sequence[dict[str, Any]]) -> None:
        """Queue ``payloads`` for ``url`` and flush what is due. Never raises."""
        for p in payloads:
            self.outbox.add(Pending(url, p))
        self.flush()

    def _backoff(self, attempts: int) -> float:
        return float(min(self.backoff_cap_s, self.backoff_s * (2 ** max(0, attempts - 1))))

    def flush(self) -> int:
        """Post every due message in order; returns how many were delivered. Never raises."""
        try:
            return self._flush()
        except Exception as exc:  # a notifier must never stop remediation
            log.exception("notify: flush failed: %s", exc)
            return 0

    def _flush(self) -> int:
        now = self.clock.now()
        start = self.clock.monotonic()
        delivered = 0
        keep: list[Pending] = []
        items, self.outbox.items = self.outbox.items, []
        stop = False
        for p in items:
            if stop or p.next_at > now or self.clock.monotonic() - start > self.flush_budget_s:
                keep.append(p)
                continue
            body = json.dumps(p.payload, separators=(",", ":")).encode()
            headers = {"Content-Type": "application/json"}
            if self.secret:
                sig = hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
                headers["X-Minutiae-Signature"] = f"sha256={sig}"
            p.attempts += 1
            wait: float | None = None
            try:
                resp = self._client().post(p.url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                p.last_error = f"{exc.__class__.__name__}: {exc}"
                stop = True  # the endpoint is away: try the rest on the next flush
            else:
                if resp.is_success:
                    delivered += 1
                    self.sent += 1
                    continue
                p.last_error = f"HTTP {resp.status_code}: {resp.text[:200]}"
                if resp.status_code not in (408, 429) and resp.status_code < 500:
                    log.error("notify: %s refused a message for good (%s)", _host(p.url), p.last_error)
                    self.dead.append(p)
                    continue
                wait = _retry_after(resp)
                if resp.status_code == 429:
                    stop = True
            if p.attempts >= self.max_attempts:
                log.error("notify: giving up on a message to %s after %d attempts (%s)",
                          _host(p.url), p.attempts, p.last_error)
                self.dead.append(p)
                continue
            p.next_at = now + (wait if wait is not None else self._backoff(p.attempts))
            log.warning("notify: post to %s failed (%s); retry %d/%d in %.0fs", _host(p.url),
                        p.last_error, p.attempts, self.max_attempts, p.next_at - now)
            keep.append(p)
        self.outbox.items = keep + self.outbox.items
        self.outbox.save()
        return delivered


def _host(url: str) -> str:
    """The URL without its path: webhook paths are secrets and never go to a log."""
    try:
        u = httpx.URL(url)
        return f"{u.scheme}://{u.host}" + (f":{u.port}" if u.port else "")
    except (httpx.InvalidURL, TypeError):
        return "<invalid url>"


def decisions_document(decisions: Sequence[Decision], alerts: Sequence[str],
                       now: float) -> dict[str, Any]:
    return {"source": "minutiae", "time": now, "alerts": list(alerts),
            "decisions": [d.to_json() for d in decisions]}


@dataclass
class WebhookNotifier:
    """Generic JSON webhook: one document per reconcile step with its new decisions and alerts
    (repeated HOLDs, ``new=False``, are left out). Implements ``Notifier``."""

    url: str
    poster: Poster

    def notify(self, decisions: Sequence[Decision], alerts: Sequence[str] = ()) -> None:
        try:
            fresh = [d for d in decisions if d.new]
            if fresh or alerts:
                doc = decisions_document(fresh, alerts, self.poster.clock.now())
                self.poster.post(self.url, [doc])
            else:
                self.poster.flush()
        except Exception as exc:  # never stop remediation
            log.exception("notify: webhook failed: %s", exc)


def from_env(url: str, env: Mapping[str, str], ctx: NotifyContext) -> Notifier:
    """``MINUTIAE_WEBHOOK_URL`` (+ ``MINUTIAE_WEBHOOK_SECRET`` for the HMAC signature) → a
    ``WebhookNotifier``."""
    secret = env.get("MINUTIAE_WEBHOOK_SECRET") or None
    return WebhookNotifier(url, Poster(ctx.clock, Outbox(ctx.outbox_path("webhook")),
                                       secret=secret))

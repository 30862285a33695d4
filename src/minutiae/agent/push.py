"""Pushing reports to the controller: bearer token, retries with backoff, and an outbox that
keeps reports (in memory and on disk) while the controller is away.

Reports go oldest first; each carries ``agent.age_s`` (how long it waited, by the agent's own
clock) so the controller dates it correctly and never takes an old report for a fresh one.
A report the controller refuses as invalid (4xx other than 401/409/429) is dropped and counted;
a refused token (401) or anything else keeps it and backs off.

Unchanged verdicts are sent as heartbeats: the controller answers a full report with a
``digest`` of its content; while the agent's next reports have the same content (everything
but ``time`` and ``agent``), it sends ``{"node", "digest", "agent"}`` instead, and the
controller only refreshes the node's report time. A 409 (the controller does not have that
report: restarted from an older store, say) makes the agent send the full report at once. A
controller that returns no digest always gets full reports.

Several controller replicas (``http://a:8470,http://b:8470``): every replica takes reports, so
the agent sticks to one while it answers and moves to the next on a network error, a 5xx or
a 429, at once (no backoff until every URL has failed in turn). A report resent to another
replica after a lost answer is harmless: the controller keys a node's report by its time, and
a replayed one replaces nothing newer (the store's upsert keeps the newest).
"""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from minutiae.clock import Clock
from minutiae.errors import ConfigError


class Transport(Protocol):
    def post(self, url: str, json: Any, headers: Mapping[str, str]) -> tuple[int, Any]:
        """POST; return the HTTP status and the answer's JSON (None when it is not JSON);
        raise ``httpx.HTTPError`` when unreachable."""
        ...


class HttpxTransport:
    def __init__(self, timeout_s: float = 5.0, plain_http: bool = False) -> None:
        # For an http:// controller no certificate is ever checked: skip loading the CA bundle
        # (~1 MB resident). The context still refuses any TLS peer, should one ever be used.
        verify: ssl.SSLContext | bool = (ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT) if plain_http
                                         else True)
        self.client = httpx.Client(timeout=timeout_s, verify=verify)

    def post(self, url: str, json: Any, headers: Mapping[str, str]) -> tuple[int, Any]:
        r = self.client.post(url, json=json, headers=dict(headers))
        try:
            answer = r.json()
        except ValueError:
            answer = None
        return r.status_code, answer


@dataclass
class PushResult:
    sent: int = 0
    dropped: int = 0
    failed: bool = False
    error: str | None = None


@dataclass
class Outbox:
    """Reports not yet accepted by the controller (newest last), capped at ``limit``; kept in
    ``path`` (JSON lines, rewritten atomically) so a restart loses nothing."""

    path: Path | None = None
    limit: int = 360
    items: deque[dict[str, Any]] = field(default_factory=deque)
    overflowed: int = 0

    def load(self) -> str | None:
        """Read a previous outbox; returns a note when it could not (the file is then ignored)."""
        if self.path is None or not self.path.exists():
            return None
        try:
            lines = self.path.read_text("utf-8").splitlines()
            self.items = deque((json.loads(x) for x in lines if x.strip()), maxlen=None)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            self.items = deque()
            return f"{self.path}: outbox unreadable, starting empty ({exc})"
        self._cap()
        return None

    def _cap(self) -> None:
        while len(self.items) > self.limit:
            self.items.popleft()
            self.overflowed += 1

    def add(self, report: dict[str, Any]) -> None:
        self.items.append(report)
        self._cap()

    def save(self) -> str | None:
        if self.path is None:
            return None
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text("".join(json.dumps(x) + "\n" for x in self.items), "utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            return f"{self.path}: cannot save outbox ({exc.strerror or exc})"
        return None


#: this agent process (a report's ``agent.mono`` means something only within it)
RUN_ID = uuid.uuid4().hex


def age_of(agent: Mapping[str, Any], clock: Clock, now: float) -> float:
    """How long a report waited: by the monotonic clock when this process made it (a jumping
    wall clock neither ages nor rejuvenates it), else by the wall clock since ``created``."""
    mono = agent.get("mono")
    if agent.get("run") == RUN_ID and isinstance(mono, int | float):
        return max(0.0, clock.monotonic() - float(mono))
    return max(0.0, now - float(agent.get("created", now)))


def content_key(report: Mapping[str, Any]) -> str:
    """What a heartbeat stands for: the report without ``time``, ``agent`` and ``digest``."""
    content = {k: v for k, v in report.items() if k not in ("time", "agent", "digest")}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class Pusher:
    def __init__(self, url: str | Sequence[str], token: str, clock: Clock,
                 transport: Transport | None = None, *, retries: int = 2,
                 backoff_s: float = 0.5, max_backoff_s: float = 300.0) -> None:
        urls = [u.strip() for u in (url.split(",") if isinstance(url, str) else url)]
        #: every controller replica's report URL; ``url`` is the one in use
        self.urls = [u.rstrip("/") + "/v1/reports" for u in urls if u] or ["/v1/reports"]
        for u in self.urls:   # a newline in --controller: InvalidURL on every cycle, for ever
            try:
                httpx.URL(u)
            except httpx.InvalidURL as exc:
                raise ConfigError(f"--controller {u.removesuffix('/v1/reports')!r}: {exc}"
                                  ) from None
        self._at = 0
        self.headers = {"Authorization": f"Bearer {token}"}
        self.clock = clock
        self.transport = transport or HttpxTransport(
            plain_http=all(u.startswith("http://") for u in self.urls))
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.failures = 0
        self.next_try = 0.0
        #: (content key, digest) of the last full report the controller acknowledged
        self.ack: tuple[str, str] | None = None

    @property
    def url(self) -> str:
        return self.urls[self._at]

    def _next_url(self) -> None:
        """Move to the next replica; the heartbeat digest was the old one's."""
        self._at = (self._at + 1) % len(self.urls)
        self.ack = None

    def _post(self, body: dict[str, Any]) -> tuple[int, Any]:
        """Status code, after up to ``retries`` retries (at least one try per URL) on network
        errors and 5xx/429: the next URL at once, a doubling backoff once all were tried.
        Raises the last network error."""
        delay = self.backoff_s
        tries = max(self.retries + 1, len(self.urls))
        for attempt in range(tries):
            try:
                code, answer = self.transport.post(self.url, body, self.headers)
            except httpx.HTTPError:
                if attempt == tries - 1:
                    raise
            else:
                if (code < 500 and code != 429) or attempt == tries - 1:
                    return code, answer
            if len(self.urls) > 1:
                self._next_url()
                if body.get("digest") is not None and "status" not in body:
                    raise _Resend()  # a heartbeat means nothing to another replica
            if len(self.urls) == 1 or (attempt + 1) % len(self.urls) == 0:
                self.clock.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def flush(self, outbox: Outbox, born: dict[int, float] | None = None) -> PushResult:
        """Send what the outbox holds, oldest first; stop at the first failure and back off
        (the next attempt waits ``backoff_s * 2**failures``, capped)."""
        res = PushResult()
        now = self.clock.now()
        if now < self.next_try:
            res.failed = True
            res.error = f"controller unreachable; next try in {self.next_try - now:.0f}s"
            return res
        while outbox.items:
            body = dict(outbox.items[0])
            agent = dict(body.get("agent", {}))
            agent["age_s"] = age_of(agent, self.clock, self.clock.now())
            body["agent"] = agent
            key = content_key(body)
            beat = self.ack is not None and self.ack[0] == key
            if beat and self.ack is not None:
                body = {"node": body.get("node"), "digest": self.ack[1], "agent": agent}
            try:
                code, answer = self._post(body)
            except _Resend:
                continue   # the same report in full, to the next replica
            except httpx.HTTPError as exc:
                return self._fail(res, f"{self.url}: {type(exc).__name__}: {exc}")
            if 200 <= code < 300:
                outbox.items.popleft()
                res.sent += 1
                if not beat:
                    digest = answer.get("digest") if isinstance(answer, dict) else None
                    self.ack = (key, digest) if isinstance(digest, str) else None
                continue
            if code == 409 and beat:   # the controller lacks that report: send it in full
                self.ack = None
                continue
            if code in (401, 403):
                return self._fail(res, f"{self.url}: token refused (HTTP {code})")
            if 400 <= code < 500 and code != 429:
                outbox.items.popleft()
                res.dropped += 1
                continue
            return self._fail(res, f"{self.url}: HTTP {code}")
        self.failures = 0
        self.next_try = 0.0
        return res

    def _fail(self, res: PushResult, why: str) -> PushResult:
        self.failures += 1
        wait = min(self.max_backoff_s, self.backoff_s * 2 ** self.failures)
        self.next_try = self.clock.now() + wait
        res.failed = True
        res.error = f"{why}; reports kept in the outbox, retry in {wait:.0f}s"
        return res


class _Resend(Exception):
    """A heartbeat could not be delivered and the agent moved to another replica."""

"""The web UI's sessions and its fleet snapshot.

Sessions are stateless, derived from the controller's tokens: ``POST /ui/login`` with the admin
token (or, when ``serve`` has one, the read-only token) sets the cookie
``<role>.<nonce>.HMAC(<role's token>, <role> + "session" + nonce)`` (HttpOnly, SameSite=Strict),
so a session survives a controller restart and dies with a token change. An action needs an
``admin`` session AND the CSRF token ``HMAC(admin token, "csrf" + nonce)`` in ``X-CSRF-Token``
(the page carries it; htmx sends it). With a read-only token configured, the views that show
evidence (map, node, audit) need a session of either role, like ``/v1/nodes``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from fastapi import Request

from minutiae.controller import queries
from minutiae.controller.http.pages import Tiles
from minutiae.controller.service import Controller

COOKIE = "minutiae_ui"
ADMIN, READ = "admin", "read"
MAX_FORM = 65536


async def form(request: Request) -> dict[str, str]:
    """A urlencoded form body (htmx's default), without python-multipart; 64 KiB at most
    (over that: ``{"\\0": why}``)."""
    body = await request.body()
    if len(body) > MAX_FORM:
        return {"\0": "form over 64 KiB"}
    return {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}


@dataclass(frozen=True, slots=True)
class Session:
    role: str
    nonce: str

    @property
    def admin(self) -> bool:
        return self.role == ADMIN


class Refused(Exception):
    """An action refused: ``code`` (401 no session, 403 read-only session or stale CSRF)."""

    def __init__(self, code: int, why: str, text: str) -> None:
        super().__init__(text)
        self.code, self.why = code, why


class Sessions:
    """Sessions and CSRF tokens derived from the admin token (and the read-only token)."""

    def __init__(self, token: str, read_token: str | None = None) -> None:
        self.keys = {ADMIN: token.encode()}
        if read_token:
            self.keys[READ] = read_token.encode()
        #: the evidence views need a session (``serve`` has a read-only token)
        self.closed_reads = bool(read_token)

    def _mac(self, role: str, what: str) -> str:
        return hmac.new(self.keys[role], (role + what).encode(), hashlib.sha256).hexdigest()

    def login(self, given: str) -> str | None:
        """The cookie for the token ``given`` (admin wins if both match), else None."""
        got = given.encode()
        roles = [r for r, key in self.keys.items() if hmac.compare_digest(got, key)]
        if not roles:
            return None
        role = ADMIN if ADMIN in roles else READ
        nonce = secrets.token_hex(16)
        return f"{role}.{nonce}.{self._mac(role, 'session' + nonce)}"

    def session(self, request: Request) -> Session | None:
        role, _, rest = (request.cookies.get(COOKIE) or "").partition(".")
        nonce, _, mac = rest.partition(".")
        if role not in self.keys or not nonce or not hmac.compare_digest(
                mac.encode(), self._mac(role, "session" + nonce).encode()):
            return None
        return Session(role, nonce)

    def csrf(self, s: Session | None) -> str:
        return self._mac(ADMIN, "csrf" + s.nonce)[:32] if s is not None and s.admin else ""

    def can_read(self, request: Request) -> bool:
        return not self.closed_reads or self.session(request) is not None

    def check(self, request: Request) -> Session:
        """The admin session of an action request, else :class:`Refused`."""
        s = self.session(request)
        if s is None:
            raise Refused(401, "ui_session", "log in with the controller token first")
        if not s.admin:
            raise Refused(403, "ui_read_only", "this session has the read-only token: actions "
                                               "need the admin token")
        got = request.headers.get("x-csrf-token", "")
        if not hmac.compare_digest(got.encode(), self.csrf(s).encode()):
            raise Refused(403, "ui_csrf", "missing or stale CSRF token: reload the page")
        return s


class Snapshot:
    """The fleet's rows and status for the UI, kept by a background thread every ``every_s``
    while the UI is used (stops after ``idle_s`` without a request) and by an action for the
    nodes it acted on. Rows come from a :class:`~minutiae.controller.queries.RowCache`: a
    refresh remakes only the rows whose node changed (a whole 20,000-node ``node_rows`` costs
    100-300 ms of CPU; holding the interpreter that long, it made every request that ran beside
    it wait: an action's answer 150-320 ms). ``data`` is replaced whole, never changed in
    place; its rows list stays the same object while no row changed (renderings of it are
    kept)."""

    def __init__(self, controller: Controller, every_s: float = 4.0, idle_s: float = 60.0):
        self.ctl, self.every_s, self.idle_s = controller, every_s, idle_s
        self.lock = threading.Lock()
        self.building = threading.Lock()
        self.rows = queries.RowCache()
        self.data: tuple[list[dict[str, Any]], dict[str, Any]] | None = None
        self.used = 0.0
        self.thread: threading.Thread | None = None
        self.wake = threading.Event()
        #: renderings of the current rows (the map for given filters), dropped with them
        self._cache: dict[tuple[object, ...], str] = {}
        self._cache_of: object = None
        #: the map's tiles by row (``pages.fleet_map``): after a change only the changed
        #: nodes' tiles are made again (20,000 tiles: most of a map's rendering)
        self.tiles: Tiles = {}

    def refresh(self, nodes: Collection[str] | None = None) -> None:
        """Rows up to date (``nodes``: only these changed; ``()``: none, the status only) and
        the status made again from them."""
        with self.building:   # one at a time: the last one made holds every change
            rows, counted = self.rows.refresh(self.ctl, nodes)
            self.data = rows, queries.status(self.ctl, rows, counted)

    def _run(self) -> None:
        while time.monotonic() - self.used < self.idle_s:
            try:
                self.refresh()
            except Exception as exc:  # keep the UI up; say what failed
                self.ctl.problem(f"web UI snapshot failed: {type(exc).__name__}: {exc}")
            self.wake.wait(self.every_s)
            self.wake.clear()
        with self.lock:
            self.thread = None

    def get(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self.used = time.monotonic()
        if self.data is None:
            self.refresh()
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True,
                                               name="minutiae-ui-snapshot")
                self.thread.start()
        assert self.data is not None
        return self.data

    def render(self, key: tuple[object, ...],
               make: Callable[[list[dict[str, Any]]], str]) -> str:
        """``make(rows)`` of the current rows, made once per rows and ``key`` (every open page
        polls the map: the same filters cost one rendering while no node changed)."""
        rows = self.get()[0]
        with self.lock:
            if self._cache_of is not rows:
                self._cache, self._cache_of = {}, rows
                if len(self.tiles) > 5 * len(rows) + 1024:   # rows gone: their tiles too
                    live = {id(r): r for r in rows}
                    self.tiles = {k: t for k, t in self.tiles.items()
                                  if live.get(k[0]) is t[0]}
            hit = self._cache.get(key)
        if hit is None:
            hit = make(rows)
            with self.lock:
                if self._cache_of is rows and len(self._cache) < 64:
                    self._cache[key] = hit
        return hit

    def acted(self, nodes: Collection[str] = ()) -> None:
        """After an action on ``nodes`` (none: pause, unpause): their rows and the status made
        again now, in the request (no other node's row is looked at), so the page's next poll
        shows the action."""
        self.refresh(nodes)

    def status_now(self) -> dict[str, Any]:
        """The snapshot's status with the controller's pause as it is now (after pause or
        unpause, without a rebuild)."""
        st = dict(self.get()[1])
        p = self.ctl.memory.pause
        st["paused"] = None if p is None else {"reason": p.reason, "since": p.since, "by": p.by}
        return st

"""Interactive Slack: the ``/minutiae`` slash command and the decision messages' buttons.

- ``POST /slack/commands``: ``/minutiae explain gpu017``, ``/minutiae status``,
  ``/minutiae nodes [drained|draining|down|unhealthy|unknown|silent]``; answered ephemerally.
- ``POST /slack/actions``: the buttons ``notify/slack.py`` puts on each decision message
  (``minutiae_undo``: resume the node at once, ``minutiae_resolve``: acknowledge and resume
  after the healthy delay, ``minutiae_pause``); audited with the Slack user
  (``by="slack:<user id> (<name>)"``).

Every request is verified with ``slack_sdk``'s ``SignatureVerifier`` (the app's signing secret,
``MINUTIAE_SLACK_SIGNING_SECRET``; 5-minute timestamp window, on the controller's clock); a
signature already seen inside the window is a replay. Forged, tampered, stale or replayed
requests get 401 and an audit line (the ``minutiae.audit`` log and the controller's problems);
without a signing secret both endpoints answer 404 and do nothing.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from slack_sdk.signature import Clock as SlackClock
from slack_sdk.signature import SignatureVerifier
from starlette.concurrency import run_in_threadpool

from minutiae.clock import Clock
from minutiae.controller.notify.slack import hostlist
from minutiae.controller.service import Controller
from minutiae.errors import MinutiaeError
from minutiae.schedulers.base import make_reason, validate_node

audit_log = logging.getLogger("minutiae.audit")
WINDOW_S = 300
MAX_SEEN = 10_000
_STATES = ("drained", "draining", "down", "available")
_HEALTH = ("healthy", "unhealthy", "unknown")


class _Clock(SlackClock):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def now(self) -> float:
        return self.clock.now()


class Verifier:
    """Signature (``slack_sdk``) + replay check; ``why`` of a refusal or None."""

    def __init__(self, secret: str, clock: Clock) -> None:
        self.sig = SignatureVerifier(secret, clock=_Clock(clock))
        self.clock = clock
        self.seen: OrderedDict[str, float] = OrderedDict()
        self.lock = threading.Lock()

    def refuse(self, body: bytes, headers: Mapping[str, str]) -> str | None:
        ts, sig = headers.get("x-slack-request-timestamp"), headers.get("x-slack-signature")
        if not ts or not sig or not ts.isdigit():
            return "unsigned"
        if not self.sig.is_valid(body, ts, sig):
            return "stale" if abs(self.clock.now() - int(ts)) > WINDOW_S else "bad signature"
        now = self.clock.now()
        with self.lock:
            while self.seen and (next(iter(self.seen.values())) < now - WINDOW_S
                                 or len(self.seen) > MAX_SEEN):
                self.seen.popitem(last=False)
            if sig in self.seen:
                return "replayed"
            self.seen[sig] = now
        return None


def _say(text: str, public: bool = False) -> JSONResponse:
    return JSONResponse({"response_type": "in_channel" if public else "ephemeral",
                         "text": text})


def command(controller: Controller, text: str) -> str:
    """The answer to ``/minutiae <text>`` (read-only)."""
    words = text.split()
    verb = words[0].lower() if words else "help"
    if verb == "status":
        st = controller.status()
        p = st.get("paused")
        h = st["health"]
        role = f", {st['role']}" if "role" in st else ""
        return (f"*{st['nodes']} nodes*: {h.get('healthy', 0)} healthy, "
                f"{h.get('unhealthy', 0)} unhealthy, {h.get('unknown', 0)} unknown; "
                f"{st['unavailable']} unavailable, {st['silent']} silent{role}; "
                + (f"*paused* ({p['by']}): {p['reason']}" if p else "acting"))
    if verb == "explain" and len(words) == 2:
        validate_node(words[1])
        ex = controller.explain(words[1])
        ev = "\n".join(ex.get("current_evidence") or (ex.get("last_action") or {}).get(
            "evidence") or [])
        undo = f"\nundo: `{ex['undo']}`" if ex.get("undo") else ""
        return f"*{words[1]}*: {ex['why']}" + (f"\n```{ev[:2500]}```" if ev else "") + undo
    if verb == "nodes":
        want = words[1].lower() if len(words) > 1 else ""
        if want and want not in (*_STATES, *_HEALTH, "silent"):
            return f"unknown filter {want!r}: one of {', '.join((*_STATES, *_HEALTH, 'silent'))}"
        rows = controller.node_rows()
        names = [r["node"] for r in rows if not want or r.get("sched") == want
                 or r["health"] == want or (want == "silent" and r.get("silent"))]
        out = f"{len(names)} node(s){' ' + want if want else ''}: `{hostlist(names) or '-'}`"
        would = [r["node"] for r in rows if r.get("would")] if want == "drained" else []
        if would:   # dry-run: the scheduler's word above, what minutiae would have done here
            out += f"\ndry-run, would be drained: {len(would)} node(s): `{hostlist(would)}`"
        return out
    return ("usage: `/minutiae status` · `/minutiae explain NODE` · "
            "`/minutiae nodes [drained|unhealthy|silent|…]`")


def button(controller: Controller, payload: Mapping[str, Any]) -> str:
    """Apply one button press; the Slack user goes into the audit."""
    user = payload.get("user") or {}
    who = f"slack:{user.get('id', '?')} ({user.get('username') or user.get('name') or '?'})"
    acts = payload.get("actions") or []
    if payload.get("type") != "block_actions" or not acts:
        return "nothing to do"
    a = acts[0]
    action, node = str(a.get("action_id", "")), str(a.get("value", ""))
    if action == "minutiae_pause":
        controller.pause(make_reason(f"paused from Slack by {who} (after {node})"))
        audit_log.info(json.dumps({"audit": "pause", "by": who, "node": node}))
        return f"paused by {who}: `minutiae unpause` (or the web UI) to resume acting"
    validate_node(node)
    if action in ("minutiae_undo", "minutiae_resolve"):
        now = action == "minutiae_undo"
        out = controller.resolve(node, f"{'undo' if now else 'resolve'} from Slack", now=now,
                                 by=who)
        return f"{node}: resolved by {who}; resumed {out.get('resumed') or 'no (not our drain)'}"
    return f"unknown action {action!r}"


def router(controller: Controller, refused: Callable[[str], None] = lambda why: None,
           env: Mapping[str, str] | None = None) -> APIRouter:
    r = APIRouter(include_in_schema=False)
    secret = (os.environ if env is None else env).get("MINUTIAE_SLACK_SIGNING_SECRET", "")
    verifier = Verifier(secret, controller.clock) if secret else None

    async def verified(request: Request) -> tuple[bytes, JSONResponse | None]:
        body = await request.body()
        if verifier is None:
            # 404, not 503: the route is off on this server, nothing is failing (every 5xx is
            # a bug, issue 16)
            return body, JSONResponse({"detail": "Slack is not configured "
                                       "(MINUTIAE_SLACK_SIGNING_SECRET)"}, status_code=404)
        why = verifier.refuse(body, request.headers)
        if why is None:
            return body, None
        refused("slack_" + why.replace(" ", "_"))
        line = {"audit": "slack request refused", "why": why, "path": request.url.path,
                "client": request.client.host if request.client else None}
        audit_log.warning(json.dumps(line))
        controller.problem(f"Slack request refused ({why}) on {request.url.path}")
        return body, JSONResponse({"detail": f"Slack request refused: {why}"}, status_code=401)

    @r.post("/slack/commands")
    async def commands(request: Request) -> JSONResponse:
        body, no = await verified(request)
        if no is not None:
            return no
        form = parse_qs(body.decode(errors="replace"))
        try:
            return _say(command(controller, form.get("text", [""])[0]))
        except MinutiaeError as exc:
            return _say(f"error: {exc}")

    @r.post("/slack/actions")
    async def actions(request: Request) -> JSONResponse:
        body, no = await verified(request)
        if no is not None:
            return no
        try:
            payload = json.loads(parse_qs(body.decode(errors="replace"))["payload"][0])
            return _say(await run_in_threadpool(button, controller, payload), public=True)
        except (KeyError, ValueError) as exc:
            return JSONResponse({"detail": f"bad interaction payload: {exc}"}, status_code=400)
        except MinutiaeError as exc:
            return _say(f"error: {exc}")

    return r

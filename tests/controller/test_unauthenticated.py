"""0 unauthenticated mutating actions (issue 14): every route of the real app whose method can
change something (POST, PUT, PATCH, DELETE) is enumerated from the app itself, so a route added
later is covered without editing this test. Each is called without credentials, with the
read-only token, with a forged Slack signature, and (UI) with a read-only session or a stale
CSRF token: 401 or 403 every time, and nothing in the controller changes (memory, pause,
audit log, reports, tolerances, scheduler calls)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.routing import Route

from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "admin-token-0123456789abcdef"
READ = "read-token-0123456789abcdef"
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
#: logging out only deletes the browser's cookie (no state on the server to change)
NO_SERVER_STATE = {"/ui/logout"}
XID = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
       "message": "GPU has fallen off the bus"}
BODY = {"reason": "x", "now": True, "nodes": 3, "node": "gpu017", "status": "critical",
        "checks": [{"check": "gpu", "status": "critical", "findings": [XID]}]}


def _routes(app: Any) -> list[tuple[str, str]]:
    """(method, path) of every mutating route, through included routers (FastAPI >= 0.16x
    keeps them as ``_IncludedRouter`` wrappers; ``make_app`` includes without prefixes)."""
    out = []
    todo = list(app.routes)
    while todo:
        r = todo.pop()
        inner = getattr(r, "original_router", None)
        if inner is not None:
            todo += inner.routes
        elif isinstance(r, APIRoute | Route):
            out += [(m, r.path) for m in sorted((r.methods or set()) & MUTATING)]
    return sorted(set(out))


def _path(p: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: {"node": "gpu017", "job": "job1"}.get(m[1], "x"), p)


def _fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
           ) -> tuple[Controller, RecordingBackend, TestClient]:
    monkeypatch.setenv("MINUTIAE_SLACK_SIGNING_SECRET", "8f742231b10e8888abcd99yyyzzz85a5")
    be = RecordingBackend(name="slurm")
    for i in range(1, 21):
        be.add_node(f"gpu{i:03d}")
    ctl = Controller(Store(tmp_path / "c.db"), be, replace(load_policy(), dry_run=False),
                     FakeClock())
    c = TestClient(make_app(ctl, TOKEN, read_token=READ))
    h = {"Authorization": f"Bearer {TOKEN}"}
    for i in range(1, 21):
        bad = i == 17
        st = "critical" if bad else "ok"
        assert c.post("/v1/reports", headers=h, json={
            "node": f"gpu{i:03d}", "status": st,
            "checks": [{"check": "gpu", "status": st, "findings": [XID] if bad else []}]}
        ).status_code == 202
    ctl.step()
    return ctl, be, c


def _state(ctl: Controller, be: RecordingBackend) -> tuple[object, ...]:
    return (ctl.memory, len(ctl.store.audit(limit=10_000)), ctl.counters.reports,
            ctl.tolerances(), list(be.calls), dict(ctl.intake.reports))


def _session(c: TestClient, token: str) -> str:
    c.cookies.clear()
    r = c.post("/ui/login", data={"token": token}, follow_redirects=False)
    assert r.status_code == 303
    m = re.search(r'"X-CSRF-Token": "([0-9a-f]*)"', c.get("/ui").text)
    assert m is not None
    return m.group(1)


def test_every_mutating_route_refuses_without_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctl, be, c = _fleet(tmp_path, monkeypatch)
    routes = _routes(c.app)
    paths = {p for _, p in routes}
    # the enumeration sees every area: API, UI, Slack (a route missing here is a test bug)
    assert {"/v1/pause", "/v1/unpause", "/v1/reports", "/v1/nodes/{node}/resolve",
            "/v1/timings", "/v1/jobs/{job}/tolerance", "/ui/actions/pause",
            "/ui/actions/resolve/{node}", "/ui/actions/drain/{node}", "/ui/actions/undo/{node}",
            "/slack/actions", "/slack/commands", "/ui/login"} <= paths
    before = _state(ctl, be)
    refused: list[tuple[str, str, str, int]] = []
    for method, path in routes:
        if path in NO_SERVER_STATE:
            continue
        url = _path(path)
        tries: dict[str, dict[str, Any]] = {
            "nothing": {},
            "read token": {"headers": {"Authorization": f"Bearer {READ}"}},
            "wrong token": {"headers": {"Authorization": "Bearer not-the-token"}},
            "forged Slack": {"headers": {"X-Slack-Request-Timestamp": "1700000000",
                                         "X-Slack-Signature": "v0=" + "0" * 64}},
        }
        for how, kw in tries.items():
            c.cookies.clear()
            r = c.request(method, url, json=BODY, **kw)
            refused.append((method, path, how, r.status_code))
    wrong = [x for x in refused if x[3] not in (401, 403)]
    assert not wrong, wrong
    assert _state(ctl, be) == before, "an unauthenticated request changed the controller"
    assert len(refused) >= 4 * 14


def test_ui_actions_refuse_a_read_session_and_a_stale_csrf(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctl, be, c = _fleet(tmp_path, monkeypatch)
    actions = [(m, p) for m, p in _routes(c.app) if p.startswith("/ui/actions/")]
    assert len(actions) == 5
    before = _state(ctl, be)
    csrf = _session(c, READ)
    assert csrf == ""                              # a read session gets no CSRF token
    for method, path in actions:
        r = c.request(method, _path(path), data={"reason": "x", "now": "1"},
                      headers={"X-CSRF-Token": "0" * 32})
        assert r.status_code == 403 and "read-only token" in r.text, (path, r.text)
    good = _session(c, TOKEN)
    assert re.fullmatch(r"[0-9a-f]{32}", good)
    for method, path in actions:
        for stale in ("", "0" * 32, good[:-1] + ("0" if good[-1] != "0" else "1")):
            r = c.request(method, _path(path), data={"reason": "x", "now": "1"},
                          headers={"X-CSRF-Token": stale})
            assert r.status_code == 403 and "CSRF" in r.text, (path, stale, r.text)
    assert _state(ctl, be) == before

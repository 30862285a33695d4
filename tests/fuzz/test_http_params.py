"""Hostile path parameters and query strings on every endpoint of ``minutiae serve`` (issue 16
item 6; bodies are in test_http_json_limits, generated requests in test_schemathesis): NUL,
'..', percent-encoded newline and invalid UTF-8, 4,000 characters, NaN, -1, 1e309, 20 digits,
each as every path parameter and every query parameter the spec documents plus the common ones,
with the admin token and without. No request may get a 5xx."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "fuzz-token-0123456789"
#: percent-encoded as they would arrive on the wire
VALUES = ["%00", "..%2F..%2Fetc%2Fpasswd", "%0a%0d", "%ff%fe", "x" * 4_000, "nan", "-1",
          "1e309", "12345678901234567890", "", "%E2%80%AE", "gpu001%20OR%201=1", "{}", "[]"]
#: every route, the undocumented ones too (/metrics, /healthz, the UI, Slack)
ROUTES = [
    ("GET", "/healthz"), ("GET", "/metrics"), ("GET", "/ui"), ("GET", "/ui/fragments/audit"),
    ("GET", "/ui/fragments/map"), ("GET", "/ui/fragments/node/{node}"),
    ("GET", "/ui/fragments/status"), ("GET", "/ui/static/{name}"), ("POST", "/ui/login"),
    ("POST", "/ui/logout"), ("GET", "/v1/audit"), ("GET", "/v1/jobs"), ("GET", "/v1/nodes"),
    ("GET", "/v1/nodes/{node}/explain"), ("GET", "/v1/status"), ("POST", "/v1/echo"),
    ("POST", "/v1/nodes/{node}/resolve"), ("POST", "/v1/pause"), ("POST", "/v1/unpause"),
    ("POST", "/v1/reports"), ("POST", "/v1/timings"), ("PUT", "/v1/jobs/{job}/tolerance"),
    ("DELETE", "/v1/jobs/{job}/tolerance"), ("POST", "/slack/actions"),
    ("POST", "/slack/commands"), ("GET", "/openapi.json"),
]
COMMON_QUERY = ("node", "limit", "since", "until", "job", "n", "offset", "format")
COUNTS = {"requests": 0, "5xx": 0}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    # Slack on, so its parsers are fuzzed too (unset, its endpoints answer 404 'not configured')
    mp = pytest.MonkeyPatch()
    mp.setenv("MINUTIAE_SLACK_SIGNING_SECRET", "fuzz-slack-secret")
    d = tmp_path_factory.mktemp("http")
    be = RecordingBackend(name="slurm")
    be.add_node("gpu001")
    ctl = Controller(Store(d / "c.db"), be, load_policy(), FakeClock())
    with TestClient(make_app(ctl, TOKEN), raise_server_exceptions=False) as c:
        yield c
    mp.undo()
    print(f"\nfuzz http params: {COUNTS['requests']} requests, {COUNTS['5xx']} 5xx")


def _query_names(spec: dict[str, Any], method: str, path: str) -> list[str]:
    op = spec.get("paths", {}).get(path, {}).get(method.lower(), {})
    names = [p["name"] for p in op.get("parameters", []) if p.get("in") == "query"]
    return sorted(set(names) | set(COMMON_QUERY))


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_no_5xx_for_hostile_params(client: Any, method: str, path: str) -> None:
    spec = client.get("/openapi.json").json()
    names = _query_names(spec, method, path)
    bad = []
    for value, auth in itertools.product(VALUES, (True, False)):
        url = path.replace("{node}", value or "x").replace("{job}", value or "x")
        url = url.replace("{name}", value or "x")
        query = "&".join(f"{n}={value}" for n in names)
        headers = {"Authorization": f"Bearer {TOKEN}"} if auth else {}
        r = client.request(method, f"{url}?{query}", headers=headers,
                           content=b"{}" if method in ("POST", "PUT") else None)
        COUNTS["requests"] += 1
        if r.status_code >= 500:
            COUNTS["5xx"] += 1
            bad.append(f"{method} {url[:80]}?{query[:80]} auth={auth} -> {r.status_code}: "
                       f"{r.text[:200]}")
    assert not bad, "\n".join(bad[:10])


def test_a_hostile_raw_query_string_is_never_a_5xx(client: Any, tmp_path: Path) -> None:
    raw = ["%00=%ff", "a=" + "%" * 100, "&&&=&=", "x" * 20_000 + "=1", "limit=1&limit=nan",
           "since=" + "9" * 400]
    for q, (method, path) in itertools.product(raw, ROUTES):
        url = path.replace("{node}", "gpu001").replace("{job}", "j1").replace("{name}", "x")
        r = client.request(method, f"{url}?{q}",
                           headers={"Authorization": f"Bearer {TOKEN}"})
        COUNTS["requests"] += 1
        assert r.status_code < 500, (method, url, q[:80], r.status_code, r.text[:200])

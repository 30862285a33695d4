"""Every JSON endpoint refuses hostile bodies with a 4xx before parsing them (issue 16 item 6):
deep nesting (a RecursionError 500 before), NaN/Infinity (a 500 on /v1/timings and /v1/pause),
numbers past int64 (step 10**20 was a SQLite OverflowError 500) and impossible timing values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.controller.wire import MAX_DEPTH, check_json
from minutiae.errors import DataError
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "fuzz-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
JSON_POSTS = ("/v1/reports", "/v1/timings", "/v1/pause", "/v1/unpause",
              "/v1/nodes/gpu001/resolve")


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    ctl = Controller(Store(tmp_path / "c.db"), RecordingBackend(name="slurm"), load_policy(),
                     FakeClock())
    return TestClient(make_app(ctl, TOKEN), raise_server_exceptions=False)


def nested(depth: int) -> bytes:
    return b'{"node":"gpu001","status":"ok","findings":' + b"[" * depth + b"]" * depth + b"}"


HOSTILE = {
    "deep array": b"[" * 100_000 + b"]" * 100_000,
    "deep in a report": nested(5000),
    "unclosed": b"{" + b'"a":[' * 50_000,
    "NaN seconds": b'{"job":"1","steps":[{"step":1,"seconds":NaN}],"reason":"x"}',
    "-Infinity": b'{"job":"1","steps":[{"step":1,"seconds":-Infinity}],"reason":"x"}',
    "1e999": b'{"job":"1","steps":[{"step":1,"seconds":1e999}],"reason":"x"}',
    "step 10**20": b'{"job":"1","steps":[{"step":100000000000000000000,"seconds":1}]}',
    "5000 digits": b'{"job":"1","steps":[{"step":' + b"9" * 5000 + b',"seconds":1}]}',
}


@pytest.mark.parametrize("path", JSON_POSTS)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_json_is_a_422_on_every_json_endpoint(client: TestClient, path: str,
                                                       name: str) -> None:
    r = client.post(path, content=HOSTILE[name], headers=AUTH)
    assert r.status_code == 422, (r.status_code, r.text[:200])
    assert "detail" in r.json()


def test_put_tolerance_with_nan_is_a_422(client: TestClient) -> None:
    r = client.put("/v1/jobs/77/tolerance", content=b'{"nodes":NaN}', headers=AUTH)
    assert r.status_code == 422 and "NaN" in r.json()["detail"]


@pytest.mark.parametrize(("step", "why"), [
    ({"step": -1, "seconds": 1.0}, "step -1"),
    ({"step": 1 << 60, "seconds": 1.0}, "step"),
    ({"step": 1, "rank": 1 << 32, "seconds": 1.0}, "rank 4294967296"),
    ({"step": 1, "seconds": 1e300}, "seconds per step"),
])
def test_impossible_timings_are_422_and_not_stored(client: TestClient, step: dict[str, Any],
                                                   why: str) -> None:
    r = client.post("/v1/timings", json={"job": "42", "steps": [step]}, headers=AUTH)
    assert r.status_code == 422 and why in r.json()["detail"], r.text
    assert client.post("/v1/timings", json={"job": "42", "steps": [
        {"step": 1, "rank": 0, "seconds": 2.0}]}, headers=AUTH).json()["accepted"] == 1


def test_span_checks(client: TestClient) -> None:
    base = {"job": "42", "steps": [{"step": 1, "seconds": 1.0}]}
    for extra, why in (({"start": 10.0, "end": 5.0}, "before start"),
                       ({"start": 1e300}, "not a Unix time"), ({"gpus": 1 << 40}, "gpus")):
        r = client.post("/v1/timings", json={**base, **extra}, headers=AUTH)
        assert r.status_code == 422 and why in r.json()["detail"], r.text


def test_a_body_just_inside_the_limits_is_accepted(client: TestClient) -> None:
    """Depth MAX_DEPTH and int64 max are fine (the limits refuse only what is past them)."""
    check_json(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    check_json(b'[9223372036854775807, -9223372036854775808, 1.5e300, 1e-400, "NaN [[["]')
    with pytest.raises(DataError):
        check_json(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    with pytest.raises(DataError):
        check_json(b"[9223372036854775808]")
    r = client.post("/v1/timings", json={"job": "42", "steps": [
        {"step": 1 << 53, "rank": 0, "seconds": 2.0}]}, headers=AUTH)
    assert r.status_code == 202, r.text


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=4), kids,
                                                              max_size=4),
    max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(JSONISH)
def test_check_json_agrees_with_a_real_parse(value: Any) -> None:
    """Refused exactly when the value holds a non-finite float or an int past int64; what it
    accepts parses without RecursionError (depth is bounded by max_leaves here)."""
    raw = json.dumps(value).encode()

    def bad(v: Any) -> bool:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return False
        if isinstance(v, int):
            return not -(1 << 63) <= v < 1 << 63
        if isinstance(v, float):
            return v != v or v in (float("inf"), float("-inf"))
        items = v.values() if isinstance(v, dict) else v
        return any(bad(x) for x in items)

    try:
        check_json(raw)
    except DataError:
        assert bad(value)
    else:
        assert not bad(value)
        json.loads(raw)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(alphabet='[]{}",:\\0123456789eE.-+NaIfinty ',
                                         max_size=300).map(str.encode))
def test_check_json_then_parse_never_raises_anything_else(raw: bytes) -> None:
    try:
        check_json(raw)
        json.loads(raw)
    except (DataError, ValueError):
        pass

"""Interactive Slack against the real HTTP endpoint (uvicorn on a loopback port): requests
signed the way Slack signs them (slack_sdk's generate_signature, v0 HMAC over
``v0:timestamp:body``) are answered; tampered, unsigned, stale and replayed ones get 401 and an
audit line, and change nothing. The slash command answers status/explain/nodes; the buttons
resolve/undo/pause, audited with the Slack user. Payload shapes follow Slack's documented
slash-command and block_actions requests (api.slack.com/interactivity/slash-commands,
api.slack.com/reference/interaction-payloads/block-actions)."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
import uvicorn
from slack_sdk.signature import SignatureVerifier

from minutiae.controller.http.api import make_app
from minutiae.controller.notify.slack import decision_message
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.state import Verb
from minutiae.controller.store import Store
from minutiae.schedulers.base import NodeSchedState
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "admin-token-0123456789abcdef"
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"   # the example secret of Slack's signing docs
H = {"Authorization": f"Bearer {TOKEN}"}
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "message": "GPU has fallen off the bus",
         "line": "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."}


@dataclass
class Served:
    url: str
    ctl: Controller
    be: RecordingBackend
    clock: FakeClock


def _rep(i: int, bad: bool = False) -> dict[str, object]:
    st = "critical" if bad else "ok"
    return {"node": f"gpu{i:03d}", "status": st,
            "checks": [{"check": "gpu", "status": st, "findings": [XID79] if bad else []}]}


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("MINUTIAE_SLACK_SIGNING_SECRET", SECRET)
    be = RecordingBackend(name="slurm")
    for i in range(1, 21):
        be.add_node(f"gpu{i:03d}")
    clock = FakeClock()
    ctl = Controller(Store(tmp_path / "c.db"), be, replace(load_policy(), dry_run=False), clock)
    app = make_app(ctl, TOKEN)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            httpx.get(url + "/healthz", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    for i in range(1, 21):
        assert httpx.post(url + "/v1/reports", json=_rep(i, i == 17), headers=H).status_code == 202
    ctl.step()
    assert be.nodes["gpu017"].state is NodeSchedState.DRAINED
    yield Served(url, ctl, be, clock)
    server.should_exit = True
    t.join(10)


def _signed(body: str, ts: int, secret: str = SECRET) -> dict[str, str]:
    sig = SignatureVerifier(secret).generate_signature(timestamp=str(ts), body=body)
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": sig or "",
            "Content-Type": "application/x-www-form-urlencoded"}


def _command(text: str) -> str:
    return urlencode({"token": "gIkuvaNzQIHg97ATvDxqgjtO", "team_id": "T0001",
                      "team_domain": "example", "channel_id": "C2147483705",
                      "channel_name": "ops", "user_id": "U2147483697", "user_name": "alice",
                      "command": "/minutiae", "text": text,
                      "response_url": "https://hooks.slack.com/commands/1234/5678",
                      "trigger_id": "13345224609.738474920.8088930838d88f008e0"})


def _press(action: str, node: str) -> str:
    payload = {"type": "block_actions", "team": {"id": "T0001", "domain": "example"},
               "user": {"id": "U2147483697", "username": "alice", "team_id": "T0001"},
               "api_app_id": "A0001", "trigger_id": "12321423423.333649436676.d8c1bb8",
               "container": {"type": "message", "message_ts": "1548261231.000200"},
               "actions": [{"type": "button", "action_id": action, "block_id": f"minutiae:{node}",
                            "value": node, "action_ts": "1548426417.840180"}]}
    return urlencode({"payload": json.dumps(payload)})


def test_slash_commands_signed(served: Served) -> None:
    now = int(served.clock.now())
    for text, want in (("status", "20 nodes"), ("explain gpu017", "drained by minutiae"),
                       ("nodes drained", "gpu017"), ("nodes healthy", "gpu[001-016,018-020]"),
                       ("explain bad/name", "error"), ("frobnicate", "usage")):
        body = _command(text)
        r = httpx.post(served.url + "/slack/commands", content=body, headers=_signed(body, now))
        assert r.status_code == 200, r.text
        assert want in r.json()["text"], (text, r.json())
        now += 1  # a new request: a new signature


def test_forged_tampered_stale_and_replayed_are_401_and_audited(
        served: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "minutiae.audit")
    now = int(served.clock.now())
    press = _press("minutiae_undo", "gpu017")
    url = served.url + "/slack/actions"
    cases = {
        "unsigned": httpx.post(url, content=press,
                               headers={"Content-Type": "application/x-www-form-urlencoded"}),
        "wrong secret": httpx.post(url, content=press,
                                   headers=_signed(press, now, "not-the-secret")),
        "tampered": httpx.post(url, content=press.replace("gpu017", "gpu018"),
                               headers=_signed(press, now)),
        "stale": httpx.post(url, content=press, headers=_signed(press, now - 301)),
    }
    for why, r in cases.items():
        assert r.status_code == 401, (why, r.text)
    assert served.be.nodes["gpu017"].state is NodeSchedState.DRAINED     # nothing changed
    refused = [json.loads(r.getMessage()) for r in caplog.records
               if "refused" in r.getMessage()]
    assert [x["why"] for x in refused] == ["unsigned", "bad signature", "bad signature",
                                           "stale"]
    ok = httpx.post(url, content=press, headers=_signed(press, now))
    assert ok.status_code == 200, ok.text
    assert served.be.nodes["gpu017"].state is NodeSchedState.AVAILABLE
    replay = httpx.post(url, content=press, headers=_signed(press, now))
    assert replay.status_code == 401 and "replayed" in replay.text
    assert json.loads(caplog.records[-1].getMessage())["why"] == "replayed"
    assert any("Slack request refused (replayed)" in p["what"]
               for p in httpx.get(served.url + "/v1/status").json()["problems"])
    audit = httpx.get(served.url + "/v1/audit", params={"node": "gpu017"}).json()
    resolves = [a for a in audit if a["action"] == Verb.RESOLVE.value]
    assert len(resolves) == 1 and "slack:U2147483697 (alice)" in " ".join(resolves[0]["evidence"])


def test_pause_button_and_message_buttons(served: Served) -> None:
    now = int(served.clock.now())
    press = _press("minutiae_pause", "gpu017")
    r = httpx.post(served.url + "/slack/actions", content=press, headers=_signed(press, now))
    assert r.status_code == 200 and "paused by slack:U2147483697" in r.json()["text"]
    p = served.ctl.memory.pause
    assert p is not None and "alice" in p.reason and p.by == "human"
    row = served.ctl.store.audit(node="gpu017", limit=5)
    msg = decision_message(next(d for d in [_decision(row[-1])] if d))
    acts = [b for b in msg["blocks"] if b["type"] == "actions"][0]["elements"]
    assert [a["action_id"] for a in acts] == ["minutiae_undo", "minutiae_resolve",
                                              "minutiae_pause"]
    assert all(a["value"] == "gpu017" for a in acts)


def test_without_a_secret_slack_is_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    monkeypatch.delenv("MINUTIAE_SLACK_SIGNING_SECRET", raising=False)
    be = RecordingBackend(name="slurm")
    ctl = Controller(Store(tmp_path / "c.db"), be, load_policy(), FakeClock())
    c = TestClient(make_app(ctl, TOKEN))
    body = _press("minutiae_pause", "gpu001")
    assert c.post("/slack/actions", content=body,
                  headers=_signed(body, int(ctl.clock.now()))).status_code == 404
    assert ctl.memory.pause is None


def _decision(row: object) -> object:
    from minutiae.controller.state import BudgetVerdict, Decision

    a = row.to_json()  # type: ignore[attr-defined]
    return Decision(a["node"], Verb(a["action"]), a["rule"], tuple(a["evidence"]),
                    BudgetVerdict(True, "ok", ""), a["undo"], a["time"])


def test_nodes_drained_in_dry_run_says_what_would_be_drained(tmp_path: Path) -> None:
    from minutiae.controller.http.slack import command

    be = RecordingBackend(name="slurm")
    for i in range(1, 21):
        be.add_node(f"gpu{i:03d}")
    ctl = Controller(Store(tmp_path / "c.db"), be, replace(load_policy(), dry_run=True),
                     FakeClock())
    for i in range(1, 21):
        ctl.ingest(_rep(i, i == 17))
    ctl.step()
    assert be.nodes["gpu017"].state is NodeSchedState.AVAILABLE      # dry-run: untouched
    text = command(ctl, "nodes drained")
    assert text.startswith("0 node(s) drained: `-`")                  # the scheduler's word
    assert "dry-run, would be drained: 1 node(s): `gpu017`" in text

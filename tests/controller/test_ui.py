"""The web UI (/ui) through the real app: the page and its vendored htmx, the map's filters,
hostlist search and grouping, a node's evidence, and that actions need the session (token)
and the CSRF token: refused otherwise, with nothing changed."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from fastapi.testclient import TestClient

from minutiae.controller.http.api import make_app
from minutiae.controller.http.pages import expand_hostlist
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.schedulers.base import NodeSchedState
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "admin-token-0123456789abcdef"
H = {"Authorization": f"Bearer {TOKEN}"}
LINE = ("[ 812.33] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.")
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus", "line": LINE}


def _rep(i: int, bad: bool = False) -> dict[str, object]:
    st = "critical" if bad else "ok"
    return {"node": f"gpu{i:03d}", "status": st,
            "domains": {"rack": f"r{i // 10:02d}", "leaf": f"leaf{i // 20}"},
            "checks": [{"check": "gpu", "status": st, "findings": [XID79] if bad else []}]}


def _fleet(tmp_path: Path) -> tuple[Controller, TestClient, RecordingBackend]:
    be = RecordingBackend(name="slurm")
    for i in range(1, 41):
        be.add_node(f"gpu{i:03d}")
    ctl = Controller(Store(tmp_path / "c.db"), be, replace(load_policy(), dry_run=False),
                     FakeClock())
    c = TestClient(make_app(ctl, TOKEN))
    for i in range(1, 41):
        assert c.post("/v1/reports", json=_rep(i, i == 17), headers=H).status_code == 202
    ctl.step()
    assert be.nodes["gpu017"].state is NodeSchedState.DRAINED
    return ctl, c, be


def _login(c: TestClient) -> str:
    r = c.post("/ui/login", data={"token": TOKEN}, follow_redirects=False)
    assert r.status_code == 303 and "minutiae_ui" in r.cookies
    m = re.search(r'"X-CSRF-Token": "([0-9a-f]{32})"', c.get("/ui").text)
    assert m is not None
    return m.group(1)


def test_page_is_offline_and_read_only_without_the_token(tmp_path: Path) -> None:
    _, c, _ = _fleet(tmp_path)
    page = c.get("/ui").text
    assert '<script src="/ui/static/htmx.min.js">' in page and "http" not in re.sub(
        r"https?://www\.w3\.org[^\"']*", "", page).replace("hx-", "").replace("/ui", "") \
        .split("<body")[0].replace("http-equiv", "")
    assert "read-only" in page and '"X-CSRF-Token": ""' in page
    js = c.get("/ui/static/htmx.min.js")
    assert js.status_code == 200 and "htmx" in js.text[:2000]
    assert "Zero-Clause BSD" in c.get("/ui/static/htmx.LICENSE").text
    assert c.get("/ui/static/../api.py").status_code == 404
    st = c.get("/ui/fragments/status").text
    assert "40 nodes" in st and 'id="pause"' not in st   # no button without the session


def test_map_filters_search_and_groups(tmp_path: Path) -> None:
    _, c, _ = _fleet(tmp_path)
    m = c.get("/ui/fragments/map").text
    assert m.count('class="t ') == 40 and "40 of 40 node(s)" in m
    assert "rack r01 (10)" in m and 'data-n="gpu017"' in m
    assert re.search(r'class="t h-unhealthy s-drained"[^>]*data-n="gpu017"', m)
    d = c.get("/ui/fragments/map", params={"sched": "drained"}).text
    assert "1 of 40" in d and 'data-n="gpu017"' in d
    h = c.get("/ui/fragments/map", params={"q": "gpu[001-005,030]"}).text
    assert "6 of 40" in h and 'data-n="gpu030"' in h and 'data-n="gpu006"' not in h
    g = c.get("/ui/fragments/map", params={"group": "leaf"}).text
    assert "leaf leaf0 (19)" in g and "leaf leaf2 (1)" in g
    assert expand_hostlist("gpu[1-3]x,cpu9") == {"gpu1x", "gpu2x", "gpu3x", "cpu9"}
    assert expand_hostlist("gpu01") is None
    many = ",".join(f"n{k}x[0-99999]" for k in range(50))       # 5 M names: refused, bounded
    assert expand_hostlist(many) is None
    assert len(expand_hostlist("a[0-49999],b[0-49999]") or ()) == 100_000


def test_node_panel_shows_evidence_rule_and_history(tmp_path: Path) -> None:
    _, c, _ = _fleet(tmp_path)
    p = c.get("/ui/fragments/node/gpu017").text
    assert "drained by minutiae" in p and "fallen off the bus" in p
    assert "pid=&#x27;&lt;unknown&gt;&#x27;" in p           # the kernel line, escaped
    assert "<td>drain</td>" in p and 'id="resolve"' not in p
    assert "invalid" in c.get("/ui/fragments/node/bad%20name").text.lower() or \
        "node" in c.get("/ui/fragments/node/bad%20name").text
    a = c.get("/ui/fragments/audit", params={"action": "drain"}).text
    assert "1 row(s)" in a and "gpu017" in a
    assert "0 row(s)" in c.get("/ui/fragments/audit", params={"rule": "no_such_rule"}).text
    assert "0 row(s)" in c.get("/ui/fragments/audit", params={"since": "2999-01-01T00:00"}).text


def test_actions_need_session_and_csrf(tmp_path: Path) -> None:
    ctl, c, be = _fleet(tmp_path)
    assert c.post("/ui/actions/pause", data={"reason": "x"}).status_code == 401
    assert c.post("/ui/login", data={"token": "wrong"}).status_code == 401
    csrf = _login(c)
    assert c.post("/ui/actions/pause", data={"reason": "x"}).status_code == 403
    assert c.post("/ui/actions/pause", data={"reason": "x"},
                  headers={"X-CSRF-Token": "0" * 32}).status_code == 403
    assert ctl.memory.pause is None                       # nothing changed
    r = c.post("/ui/actions/pause", data={"reason": "rack r03 firmware"},
               headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200 and "rack r03 firmware" in r.text and 'id="unpause"' in r.text
    assert ctl.memory.pause is not None and ctl.memory.pause.reason.endswith("rack r03 firmware")
    # a session from another token (the controller's token changed) is refused
    other = TestClient(make_app(ctl, "another-token-0123456789abcdef"))
    other.cookies.set("minutiae_ui", c.cookies["minutiae_ui"], path="/ui")
    assert other.post("/ui/actions/unpause", headers={"X-CSRF-Token": csrf}).status_code == 401
    assert ctl.memory.pause is not None
    assert c.post("/ui/actions/unpause", headers={"X-CSRF-Token": csrf}).status_code == 200
    assert ctl.memory.pause is None
    r = c.post("/ui/actions/resolve/gpu017", data={"reason": "GPU reseated", "now": "1"},
               headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200, r.text
    assert be.nodes["gpu017"].state is NodeSchedState.AVAILABLE
    rows = c.get("/v1/audit", params={"node": "gpu017"}).json()
    assert any(x["action"] == "resolve" and "web UI" in " ".join(x["evidence"]) for x in rows)


def test_node_panel_from_the_snapshot_is_the_controllers_explain(tmp_path: Path) -> None:
    from minutiae.controller.http.ui import explain_from

    ctl, _, _ = _fleet(tmp_path)
    for node in ("gpu017", "gpu001"):
        got, want = explain_from(ctl, node), ctl.explain(node)
        for k in ("why", "health", "current_evidence", "last_action", "undo", "history"):
            assert got[k] == want[k], (node, k)


def test_a_read_token_closes_the_evidence_views(tmp_path: Path) -> None:
    """With `serve --read-token-file`, the UI shows nodes, evidence and the audit log only to a
    session (read-only or admin token), like /v1/nodes; the status counts stay open."""
    ctl, _, _ = _fleet(tmp_path)
    c = TestClient(make_app(ctl, TOKEN, read_token="read-token-0123456789abcdef"))
    for path in ("/ui/fragments/map", "/ui/fragments/node/gpu017", "/ui/fragments/audit"):
        r = c.get(path)
        assert r.status_code == 401 and "read-only token" in r.text, path
        assert "fallen off the bus" not in r.text and "gpu017" not in r.text
    assert c.get("/v1/nodes").status_code == 401
    assert "40 nodes" in c.get("/ui/fragments/status").text
    assert "log in to see nodes" in c.get("/ui").text
    assert c.post("/ui/login", data={"token": "read-token-0123456789abcdef"},
                  follow_redirects=False).status_code == 303
    assert "read-only session" in c.get("/ui").text and '"X-CSRF-Token": ""' in c.get("/ui").text
    p = c.get("/ui/fragments/node/gpu017")
    assert p.status_code == 200 and "fallen off the bus" in p.text
    assert 'id="resolve"' not in p.text and 'id="drain"' not in p.text
    assert 'id="pause"' not in c.get("/ui/fragments/status").text
    assert "40 of 40" in c.get("/ui/fragments/map").text


def test_drain_is_held_until_resolved_and_undo_reverses(tmp_path: Path) -> None:
    ctl, c, be = _fleet(tmp_path)
    csrf = _login(c)
    h = {"X-CSRF-Token": csrf}
    before = ctl.store.audit(limit=1000)
    r = c.post("/ui/actions/drain/gpu005", data={"reason": ""}, headers=h)
    assert r.status_code == 422 and "reason is required" in r.text
    assert c.post("/ui/actions/undo/gpu006", headers=h).status_code == 409   # nothing done yet
    assert ctl.store.audit(limit=1000) == before
    r = c.post("/ui/actions/drain/gpu005", data={"reason": "fan noise, check <b>"}, headers=h)
    assert r.status_code == 200 and "gpu005 drained; held until resolved" in r.text
    assert "check &lt;b&gt;" in r.text                     # escaped in the panel
    assert be.nodes["gpu005"].state is NodeSchedState.DRAINED and be.nodes["gpu005"].ours
    row = ctl.store.audit(node="gpu005", limit=1)[0].to_json()
    assert (row["action"], row["rule"], row["status"]) == ("drain", "human", "done")
    assert "drained by web UI: fan noise" in row["evidence"][0]
    # healthy for far longer than the healthy delay: the controller does not resume it
    for _ in range(3):
        ctl.clock.advance(ctl.policy.healthy_delay_s + 60)  # type: ignore[attr-defined]
        for i in range(1, 41):
            c.post("/v1/reports", json=_rep(i, i == 17), headers=H)
        ctl.step()
    assert be.nodes["gpu005"].state is NodeSchedState.DRAINED
    holds = [a for a in c.get("/v1/audit", params={"node": "gpu005"}).json()
             if a["action"] == "hold"]
    assert len(holds) == 1 and holds[0]["budget"]["check"] == "held"   # said once
    # undo of the (human) drain: resolve and resume now
    r = c.post("/ui/actions/undo/gpu005", headers=h)
    assert r.status_code == 200 and "resumed now" in r.text, r.text
    assert be.nodes["gpu005"].state is NodeSchedState.AVAILABLE
    assert ctl.memory.nodes.get("gpu005") is None or not ctl.memory.nodes["gpu005"].held
    # undo of that resume: drained again, held
    assert c.post("/ui/actions/undo/gpu005", headers=h).status_code == 200
    assert be.nodes["gpu005"].state is NodeSchedState.DRAINED
    assert ctl.memory.nodes["gpu005"].held == "web UI: undo of the resume"
    # a node drained by someone else is left alone
    be.admin_drain("gpu009", "bios update")
    r = c.post("/ui/actions/drain/gpu009", data={"reason": "x"}, headers=h)
    assert r.status_code == 409 and "someone else" in r.text
    assert be.nodes["gpu009"].reason == "bios update"


def test_map_poll_is_204_when_nothing_changed(tmp_path: Path) -> None:
    _, c, _ = _fleet(tmp_path)
    m = c.get("/ui/fragments/map")
    v = re.search(r'id="count" data-v="([0-9a-f]{16})"', m.text)
    assert v is not None
    again = c.get("/ui/fragments/map", params={"v": v.group(1)})
    assert again.status_code == 204 and again.text == ""
    other = c.get("/ui/fragments/map", params={"v": v.group(1), "health": "unhealthy"})
    assert other.status_code == 200 and "1 of 40" in other.text


def test_status_bar_says_standby_breaker_and_silent() -> None:
    from minutiae.controller.http.pages import status_bar

    st = {"nodes": 40, "health": {"healthy": 37, "unhealthy": 2, "unknown": 1}, "silent": 3,
          "unavailable": 2, "role": "standby", "epoch": 7, "leader": "site/ctl-a",
          "dry_run": False, "paused": {"reason": "minutiae: storm: 9 nodes unhealthy in 60 s",
                                       "since": 0.0, "by": "breaker"}}
    bar = status_bar(st, authed=True)
    assert "standby · epoch 7 (leader site/ctl-a)" in bar
    assert "breaker tripped: storm: 9 nodes unhealthy in 60 s (since 1970-01-01 00:00:00Z)" in bar
    assert "3 silent" in bar and 'id="unpause"' in bar
    lead = status_bar({**st, "role": "leader", "paused": None}, authed=False)
    assert "leader · epoch 7" in lead and "(leader" not in lead and "not paused" in lead
    assert 'id="pause"' not in lead

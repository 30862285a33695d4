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
    rows = ctl.node_rows()
    for node in ("gpu017", "gpu001"):
        got, want = explain_from(ctl, rows, node), ctl.explain(node)
        for k in ("why", "health", "current_evidence", "last_action", "undo", "history"):
            assert got[k] == want[k], (node, k)
    assert explain_from(ctl, [], "gpu017")["why"] == ctl.explain("gpu017")["why"]

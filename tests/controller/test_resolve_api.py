"""POST /v1/nodes/{node}/resolve (admin token, audited) and `minutiae resolve`'s errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from minutiae.cli.main import main
from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.schedulers.base import NodeSchedState
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

ADMIN = "admin-token-0123456789abcdef"
H = {"Authorization": f"Bearer {ADMIN}"}
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus",
         "line": "[ 812.33] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                 "GPU has fallen off the bus."}


def _rep(node: str, *f: dict[str, object]) -> dict[str, object]:
    st = "critical" if f else "ok"
    return {"node": node, "status": st, "domains": {"rack": f"r-{node}"},
            "checks": [{"check": "gpu", "status": st, "findings": list(f)}]}


def test_resolve_through_the_api_acknowledges_resumes_and_is_audited(tmp_path: Path) -> None:
    be = RecordingBackend(name="slurm")
    for i in range(1, 21):
        be.add_node(f"gpu{i:03d}")
    clock = FakeClock()
    ctl = Controller(Store(tmp_path / "c.db"), be, replace(load_policy(), dry_run=False), clock)
    c = TestClient(make_app(ctl, ADMIN))
    for i in range(2, 21):
        c.post("/v1/reports", json=_rep(f"gpu{i:03d}"), headers=H)
    c.post("/v1/reports", json=_rep("gpu001", XID79), headers=H)
    ctl.step()
    assert be.nodes["gpu001"].state is NodeSchedState.DRAINED
    assert c.get("/v1/nodes/gpu001/explain").json()["undo"].startswith("minutiae resolve gpu001")
    assert c.post("/v1/nodes/gpu001/resolve", json={"reason": "x"}).status_code == 401
    assert c.post("/v1/nodes/gpu001/resolve", json={"reason": ""}, headers=H).status_code == 422
    assert c.post("/v1/nodes/gpu099/resolve", json={"reason": "x"}, headers=H).status_code == 404
    r = c.post("/v1/nodes/gpu001/resolve", headers=H,
               json={"reason": "GPU reseated", "by": "alice@login1"})
    assert r.status_code == 200, r.text
    assert r.json()["resumed"] == "after the healthy delay" and len(r.json()["acknowledged"]) == 1
    assert be.nodes["gpu001"].state is NodeSchedState.DRAINED  # waits for the healthy delay
    for _ in range(3):
        clock.advance(ctl.policy.healthy_delay_s / 2 + 1)
        c.post("/v1/reports", json=_rep("gpu001", XID79), headers=H)  # the same old line
        ctl.step()
    assert be.nodes["gpu001"].state is NodeSchedState.AVAILABLE
    audit = c.get("/v1/audit", params={"node": "gpu001"}).json()
    assert [a["action"] for a in reversed(audit)] == ["drain", "resolve", "resume"]
    assert "resolved by alice@login1: GPU reseated" in audit[1]["evidence"][0]


def test_resolve_cli_errors_are_one_line(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINUTIAE_TOKEN", ADMIN)
    rc = main(["resolve", "gpu001", "--reason", "x", "--controller", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert rc == 3 and "unreachable" in err and "Traceback" not in err
    rc = main(["resolve", "gpu001;reboot", "--reason", "x", "--controller", "http://127.0.0.1:9"])
    assert rc == 3 and "invalid node name" in capsys.readouterr().err

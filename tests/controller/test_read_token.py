"""A read-only token beside the admin token: with one, the views that show evidence (nodes,
explain, audit: kernel-log lines, reasons) need it or the admin token; it can never write."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

ADMIN, READ = "admin-token-0123456789abcdef", "read-only-token-0123456789ab"
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus",
         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                 "GPU has fallen off the bus."}


def _hdr(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def test_evidence_needs_a_token_and_the_read_token_cannot_write(tmp_path: Path) -> None:
    be = RecordingBackend(name="slurm")
    be.add_node("gpu001")
    ctl = Controller(Store(tmp_path / "c.db"), be, load_policy(), FakeClock())
    c = TestClient(make_app(ctl, ADMIN, read_token=READ))
    rep = {"node": "gpu001", "status": "critical", "domains": {"rack": "r1"},
           "checks": [{"check": "gpu", "status": "critical", "findings": [XID79]}]}
    assert c.post("/v1/reports", json=rep, headers=_hdr(READ)).status_code == 401
    assert c.post("/v1/reports", json=rep, headers=_hdr(ADMIN)).status_code == 202
    ctl.step()
    for path in ("/v1/nodes", "/v1/nodes/gpu001/explain", "/v1/audit?node=gpu001"):
        assert c.get(path).status_code == 401, path
        assert c.get(path, headers=_hdr(READ + "x")).status_code == 401, path
        assert c.get(path, headers=_hdr(READ)).status_code == 200, path
        assert c.get(path, headers=_hdr(ADMIN)).status_code == 200, path
    ex = c.get("/v1/nodes/gpu001/explain", headers=_hdr(READ)).json()
    assert "GPU has fallen off the bus" in " ".join(ex["current_evidence"])
    assert c.get("/v1/status").status_code == 200  # counts and problems, no evidence
    assert c.post("/v1/pause", json={"reason": "x"}, headers=_hdr(READ)).status_code == 401
    r = c.post("/v1/nodes/gpu001/resolve", json={"reason": "fixed"}, headers=_hdr(READ))
    assert r.status_code == 401


def test_without_a_read_token_the_views_stay_open(tmp_path: Path) -> None:
    ctl = Controller(Store(tmp_path / "c.db"), RecordingBackend(name="slurm"), load_policy(),
                     FakeClock())
    c = TestClient(make_app(ctl, ADMIN))
    assert c.get("/v1/nodes").status_code == 200

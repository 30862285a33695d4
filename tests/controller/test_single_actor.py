"""SQLite single actor: a second ``minutiae serve`` on the same database file is a standby (it
takes reports and serves reads, never reconciles or acts) until the leader dies (kill -9: the
kernel drops the flock), then it takes over with the next epoch. Real processes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from minutiae.testing.serve import ServeProcess

TOKEN = "single-actor-token-0123456789"
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus",
         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                 "GPU has fallen off the bus."}


def _report(node: str) -> dict[str, object]:
    return {"node": node, "status": "critical", "domains": {"rack": "r1"},
            "checks": [{"check": "gpu", "status": "critical", "findings": [XID79]}]}


def _status(p: ServeProcess) -> dict[str, object]:
    out: dict[str, object] = httpx.get(f"{p.url}/v1/status", headers=p.headers, timeout=5).json()
    return out


def test_second_serve_on_the_same_file_is_a_standby_until_the_leader_dies(tmp_path: Path) -> None:
    args = ("--backend", "dry-run", "--interval", "0.2", "--cluster", "lab",
            "--controller-id", "ctl")
    with ServeProcess(tmp_path, TOKEN, *args) as a, ServeProcess(tmp_path, TOKEN, *args) as b:
        sa, sb = _status(a), _status(b)
        assert (sa["role"], sa["epoch"], sa["identity"]) == ("leader", 1, "lab/ctl")
        assert sb["role"] == "standby" and sb["leader"] == sa["leader"]
        assert str(sa["leader"]).startswith("lab/ctl@")
        deadline = time.monotonic() + 10
        while not any("standby: not acting" in str(p["what"])
                      for p in sb["problems"]) and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.2)
            sb = _status(b)
        assert any("standby: not acting" in str(p["what"]) for p in sb["problems"])  # type: ignore[attr-defined]
        assert "STANDBY" in b.log.read_text()
        # the standby takes reports and serves reads, but decides nothing
        r = httpx.post(f"{b.url}/v1/reports", json=_report("gpu001"), headers=b.headers)
        assert r.status_code == 202
        time.sleep(1.0)
        assert httpx.get(f"{b.url}/v1/audit", headers=b.headers).json() == []
        assert [n["node"] for n in httpx.get(f"{b.url}/v1/nodes", headers=b.headers).json()] \
            == ["gpu001"]
        a.kill9()
        deadline = time.monotonic() + 10
        while _status(b)["role"] != "leader" and time.monotonic() < deadline:
            time.sleep(0.1)
        sb = _status(b)
        assert (sb["role"], sb["epoch"]) == ("leader", 2)
        httpx.post(f"{b.url}/v1/reports", json=_report("gpu001"), headers=b.headers)
        deadline = time.monotonic() + 10
        audit: list[dict[str, object]] = []
        while not audit and time.monotonic() < deadline:
            audit = httpx.get(f"{b.url}/v1/audit", headers=b.headers).json()
            time.sleep(0.1)
        # the new leader decides (one node of one: the shipped budget holds the drain)
        assert [(x["node"], x["action"], x["wanted"]) for x in audit] == [
            ("gpu001", "hold", "drain")]
    # structured logs: one JSON line per decision (who, what, why, budget) and per problem
    lines = [json.loads(ln) for ln in b.log.read_text().splitlines() if ln.startswith("{")]
    [dec] = [x for x in lines if x["event"] == "decision"]
    assert (dec["who"], dec["node"], dec["action"], dec["wanted"]) == ("lab/ctl", "gpu001",
                                                                       "hold", "drain")
    assert dec["budget"]["allowed"] is False and dec["budget"]["check"] and dec["why"]
    assert dec["rule"] == "needs-remediation" and dec["dry_run"] is True
    assert any(x["event"] == "problem" and "standby: not acting" in x["what"] for x in lines)

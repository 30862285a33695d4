"""End to end on Kubernetes: a real ``minutiae serve --backend kubernetes`` subprocess against
the real kube-apiserver, agent reports over HTTP, decisions posted to a local stand-in for
Slack, reports recorded and replayed by ``minutiae backtest``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from k8s_helpers import admin, admin_cordon, create_node, delete, node_events
from minutiae.cli.main import main
from minutiae.schedulers.kubernetes.backend import CONDITION, OWNER_KEY, TAINT_KEY
from minutiae.schedulers.kubernetes.http import KubeClient
from minutiae.testing.serve import ServeProcess
from webhook_endpoint import Endpoint

pytestmark = [pytest.mark.k8s, pytest.mark.slow]
TOKEN = "e2e-k8s-token-0123456789abcdef"
NODES = [f"k8e-{i:03d}" for i in range(1, 21)]
POLICY = """
dry_run = false
healthy_delay_s = 2
stale_after_s = 600
[[rule]]
name = "needs-remediation"
min_action = "reset_gpu"
do = "drain"
examples = [{ kind = "xid", code = 79, severity = "critical", action = "reboot", expect = "drain" }]
[[ladder]]
step = "reboot"
timeout_s = 1800
[[ladder]]
step = "inspect"
[budget]
max_unavailable_fraction = 0.5
[budget.storm]
fraction = 0.9
"""
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus",
         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                 "GPU has fallen off the bus."}


def wait(what: str, cond: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture()
def k8s(kubeconfig: str) -> Iterator[KubeClient]:
    api = admin(kubeconfig)
    for n in NODES:
        create_node(api, n)
    yield api
    for n in NODES:
        delete(api, f"/api/v1/nodes/{n}")
    api.close()


def post(ctl: ServeProcess, node: str, bad: bool) -> None:
    body = {"node": node, "status": "critical" if bad else "ok",
            "checks": [{"check": "gpu", "status": "critical" if bad else "ok",
                        "findings": [XID79] if bad else []}], "domains": {"rack": "r1"}}
    r = httpx.post(f"{ctl.url}/v1/reports", json=body, headers=ctl.headers, timeout=10)
    assert r.status_code == 202, r.text


def test_report_to_cordon_to_slack_to_uncordon_and_backtest(
        k8s: KubeClient, kubeconfig: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ep = Endpoint()
    (tmp_path / "policy.toml").write_text(POLICY)
    admin_cordon(k8s, "k8e-003")
    ctl = ServeProcess(tmp_path / "ctl", TOKEN, "--backend", "kubernetes", "--kubeconfig", kubeconfig,
                       "--policy", str(tmp_path / "policy.toml"), "--interval", "0.5",
                       env={"MINUTIAE_SLACK_WEBHOOK": ep.url, "MINUTIAE_RECORD": str(tmp_path / "rec")})
    try:
        with ctl:
            for n in NODES:
                post(ctl, n, n == "k8e-007")

            def cordoned() -> dict[str, Any] | None:
                obj = k8s.get("/api/v1/nodes/k8e-007")
                return obj if obj["spec"].get("unschedulable") else None

            obj = wait("k8e-007 cordoned", cordoned)
            assert obj["metadata"]["annotations"][OWNER_KEY] == "default/controller"  # identity
            assert TAINT_KEY in [t["key"] for t in obj["spec"]["taints"]]
            cond = [c for c in obj["status"]["conditions"] if c["type"] == CONDITION]
            assert cond[0]["status"] == "True"
            assert [e["reason"] for e in node_events(k8s, "k8e-007")] == ["MinutiaeCordon"]
            msg = wait("the Slack message", lambda: [m for m in ep.posted if "k8e-007" in m["text"]])[0]
            assert msg["text"].startswith("minutiae: drained k8e-007 (rule needs-remediation)")
            blob = json.dumps(msg)
            assert "`minutiae resolve k8e-007 --now" in blob and "GPU has fallen off the bus." in blob
            # healthy again: uncordoned after the 2 s healthy delay; the admin's cordon stays.
            # The controller cordons within its 0.5 s step; the critical report stays the latest
            # for 1.5 s more so that the backtest below (1 s steps, the CLI's finest) sees it too.
            time.sleep(1.5)
            for _ in range(3):
                for n in NODES:
                    post(ctl, n, False)
                time.sleep(1.0)
            wait("k8e-007 uncordoned",
                 lambda: not k8s.get("/api/v1/nodes/k8e-007")["spec"].get("unschedulable"))
            wait("the resume message", lambda: [m for m in ep.posted if m["text"].startswith(
                "minutiae: resumed k8e-007")])
            assert k8s.get("/api/v1/nodes/k8e-003")["spec"]["unschedulable"] is True
    finally:
        ep.close()
    # the recorded reports replay to the same decisions
    assert main(["backtest", str(tmp_path / "rec"), "--json", "--step", "1",
                 "--policy", str(tmp_path / "policy.toml"), "--scheduler", "kubernetes"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["action"] for d in doc["nodes"].get("k8e-007", [])] == ["drain", "resume"], (
        doc["summary"], doc["nodes"], doc["alerts"], (tmp_path / "rec" / "reports.jsonl").read_text()[:4000])
    assert doc["nodes"]["k8e-007"][0]["undo"].startswith("minutiae resolve k8e-007 --now")
    assert doc["summary"]["drains"] == 1 and "k8e-003" not in doc["nodes"]

"""A real Prometheus (scripts/services/prom-up.sh) scrapes a real `minutiae agent`'s /metrics
and answers PromQL about the node's verdict, findings and the agent's own footprint."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from minutiae.testing.serve import free_port
from prom_helpers import shared_targets

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]


def query(prom: str, q: str) -> list[dict]:
    r = httpx.get(f"{prom}/api/v1/query", params={"query": q}, timeout=10)
    r.raise_for_status()
    return r.json()["data"]["result"]


def test_prometheus_scrapes_the_agent_and_answers_promql(prom_url, prom_targets, realdata,
                                                         tmp_path):
    xml = realdata / "nvidia_smi/telegraf/a100-sxm4-v12.xml"      # 1 of 4 GPUs listed
    port = free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "minutiae.cli.main", "agent", "--node", "gpu030",
         "--nvidia-smi-xml", str(xml), "--no-nvml", "--checks", "gpu,ib",
         "--sysfs-root", str(tmp_path / "nosys"), "--state-dir", str(tmp_path / "state"),
         "--metrics-listen", f"127.0.0.1:{port}", "--interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    group = {"targets": [f"127.0.0.1:{port}"], "labels": {"node": "gpu030"}}
    try:
        with shared_targets(prom_targets, [group]):          # other tests' targets stay
            check_the_agent_s_series(prom_url, f'instance="127.0.0.1:{port}"')
    finally:
        agent.terminate()
        agent.wait(10)


def check_the_agent_s_series(prom_url: str, inst: str) -> None:
    deadline = time.monotonic() + 45
    res: list[dict] = []
    while time.monotonic() < deadline and not res:
        res = query(prom_url, f"minutiae_node_status{{{inst}}}")
        time.sleep(0.5)
    assert res, f"Prometheus never scraped {inst}"
    assert res[0]["value"][1] == "2"                          # CRITICAL
    assert res[0]["metric"]["node"] == "gpu030"
    [f] = query(prom_url, f'minutiae_findings{{{inst},kind="gpu_missing"}}')
    assert (f["metric"]["check"], f["metric"]["severity"], f["value"][1]) == (
        "gpu", "critical", "1")
    [ib] = query(prom_url, f'minutiae_check_status{{{inst},check="ib"}}')
    assert ib["value"][1] == "3"                              # no sysfs: UNKNOWN, not OK
    [rss] = query(prom_url, f"minutiae_agent_rss_bytes{{{inst}}} / 2^20")
    assert 5 < float(rss["value"][1]) < 200
    [action] = query(prom_url, f"max(minutiae_node_action{{{inst}}}) >= 2")
    assert action["value"][1] == "3"                          # reboot: drains

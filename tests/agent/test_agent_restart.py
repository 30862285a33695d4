"""A real `minutiae agent` keeps working while a real `minutiae serve` is killed and comes back:
it says what it could not do, keeps its reports in the outbox, and delivers them after."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from minutiae.testing.serve import ServeProcess

pytestmark = pytest.mark.slow
TOKEN = "agent-restart-token-0123456789"


def wait_for(pred, timeout=40.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def reports(ctl: ServeProcess) -> int:
    try:
        return int(httpx.get(f"{ctl.url}/v1/status", timeout=5).json()["counters"]["reports"])
    except httpx.HTTPError:
        return -1


def test_agent_survives_controller_restart(realdata, tmp_path):
    xml = realdata / "nvidia_smi/telegraf/dual_a5000-v13.xml"
    if not xml.exists():
        pytest.skip(f"missing {xml}")
    ctl = ServeProcess(tmp_path / "ctl", TOKEN, "--backend", "dry-run", "--interval", "1").start()
    tok = tmp_path / "token"
    tok.write_text(TOKEN)
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "minutiae.cli.main", "agent", "--controller", ctl.url,
             "--token-file", str(tok), "--node", "gpu021", "--nvidia-smi-xml", str(xml),
             "--no-nvml", "--checks", "gpu", "--state-dir", str(tmp_path / "state"),
             "--metrics-listen", "", "--interval", "0.5"], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: reports(ctl) >= 2, what="first reports")
        ctl.kill9()
        wait_for(lambda: "reports kept in the outbox" in log.read_text(), what="agent says so")
        time.sleep(1.5)
        assert agent.poll() is None                      # still running
        outbox = (tmp_path / "state" / "outbox.jsonl").read_text().splitlines()
        assert len(outbox) >= 2
        ctl.start()                                      # same port, same store
        wait_for(lambda: reports(ctl) >= 3, what="reports after the restart")
        nodes = httpx.get(f"{ctl.url}/v1/nodes", timeout=5).json()
        assert [(n["node"], n["health"]) for n in nodes] == [("gpu021", "healthy")]
        wait_for(lambda: len((tmp_path / "state" / "outbox.jsonl").read_text().splitlines()) <= 1,
                 what="outbox drained")
    finally:
        agent.terminate()
        agent.wait(10)
        ctl.stop()
    text = log.read_text()
    assert "controller unreachable" in text or "ConnectError" in text

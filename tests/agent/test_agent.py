"""The agent loop with FakeClock and a recording transport: pushes with the token, metrics,
outbox across restarts, backoff while the controller is away; real node checks on captures;
the light import path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from minutiae.agent.metrics import AgentMetrics
from minutiae.agent.push import Pusher
from minutiae.agent.runner import Agent, AgentConfig
from minutiae.model import Action, CheckResult, Finding, Severity, Status
from minutiae.node.check import CheckConfig, NodeReport, run_check
from minutiae.testing import FakeClock

TOKEN = "agent-test-token-0123456789"
XID = Finding("xid", Severity.CRITICAL, Action.REBOOT, "GPU has fallen off the bus", code=79)


class Transport:
    """Recording fake of the HTTP seam: ``codes`` are answered in turn; "down" raises."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict, dict]] = []
        self.codes: list[int | str] = []

    def post(self, url, json, headers):
        code = self.codes.pop(0) if self.codes else 202
        if code == "down":
            raise httpx.ConnectError("connection refused")
        self.sent.append((url, json, dict(headers)))
        return code, None   # an old controller: no digest, so every report goes in full


def fake_check(clock, findings=()):
    def check():
        res = (CheckResult("gpu", Status.CRITICAL if findings else Status.OK, tuple(findings), None, 8),
               CheckResult("ib", Status.UNKNOWN, (), "no /sys/class/infiniband", 0))
        return NodeReport("ignored", clock.now(), res)
    return check


def make(tmp_path, clock, transport, findings=()):
    pusher = Pusher("http://ctl:8470/", TOKEN, clock, transport, retries=1, backoff_s=1.0)
    return Agent(AgentConfig("gpu011", 10.0, tmp_path / "state", {"rack": "r2"}),
                 fake_check(clock, findings), clock, pusher, AgentMetrics(), log=lambda s: None)


def test_report_is_pushed_with_token_and_metrics_follow(tmp_path):
    clock, tr = FakeClock(), Transport()
    agent = make(tmp_path, clock, tr, [XID])
    agent.run(cycles=3)
    assert len(tr.sent) == 3 and clock.sleeps == [10.0, 10.0]
    url, body, headers = tr.sent[-1]
    assert url == "http://ctl:8470/v1/reports"
    assert headers == {"Authorization": f"Bearer {TOKEN}"}
    assert body["node"] == "gpu011" and body["domains"] == {"rack": "r2"}
    assert body["status"] == "critical" and body["agent"]["seq"] == 3
    assert body["checks"][0]["findings"][0]["code"] == 79
    reg = agent.metrics.registry
    assert reg.get_sample_value("minutiae_node_status") == 2
    assert reg.get_sample_value("minutiae_check_status", {"check": "ib"}) == 3
    assert reg.get_sample_value("minutiae_findings",
                                {"check": "gpu", "kind": "xid", "severity": "critical"}) == 1
    assert reg.get_sample_value("minutiae_agent_push_total", {"outcome": "ok"}) == 3
    assert reg.get_sample_value("minutiae_agent_rss_bytes") > 1e6


def test_controller_away_buffers_on_disk_and_survives_a_restart(tmp_path):
    clock, tr = FakeClock(), Transport()
    tr.codes = ["down"] * 100
    agent = make(tmp_path, clock, tr)
    agent.run(cycles=4)
    assert tr.sent == [] and len(agent.outbox.items) == 4
    assert "retry in" in (agent.last_push.error or "")
    lines = (tmp_path / "state" / "outbox.jsonl").read_text().splitlines()
    assert [json.loads(x)["agent"]["seq"] for x in lines] == [1, 2, 3, 4]
    # restart: a new agent picks up the outbox and the sequence, and the controller is back
    tr.codes = []
    clock.advance(600)
    agent2 = make(tmp_path, clock, tr)
    agent2.run_once()
    assert [b["agent"]["seq"] for _, b, _ in tr.sent] == [1, 2, 3, 4, 5]
    ages = [b["agent"]["age_s"] for _, b, _ in tr.sent]
    assert ages[0] > ages[3] > ages[4] == 0.0
    assert agent2.outbox.items == type(agent2.outbox.items)()


def test_backoff_doubles_and_does_not_hammer_the_controller(tmp_path):
    clock, tr = FakeClock(), Transport()
    tr.codes = ["down"] * 1000
    agent = make(tmp_path, clock, tr)
    attempts = []
    real_post = tr.post

    def counting(url, json, headers):
        attempts.append(clock.now())
        return real_post(url, json, headers)

    tr.post = counting  # type: ignore[method-assign]
    agent.run(cycles=30)                          # 300 s of controller outage
    assert agent.pusher.failures >= 4
    assert len(attempts) < 30                     # fewer tries than cycles: it backs off
    assert agent.metrics.registry.get_sample_value("minutiae_agent_buffered_reports") == 30


def test_invalid_report_is_dropped_but_refused_token_keeps_it(tmp_path):
    clock, tr = FakeClock(), Transport()
    agent = make(tmp_path, clock, tr)
    tr.codes = [422]
    agent.run_once()
    assert not agent.outbox.items
    assert agent.metrics.registry.get_sample_value("minutiae_agent_push_total",
                                                   {"outcome": "rejected"}) == 1
    tr.codes = [401]
    agent.run_once()
    assert len(agent.outbox.items) == 1 and "token refused" in agent.last_push.error


def test_broken_check_does_not_kill_the_agent(tmp_path):
    clock = FakeClock()
    calls = []

    def boom():
        calls.append(1)
        raise RuntimeError("sensor exploded")

    logs: list[str] = []
    agent = Agent(AgentConfig("gpu012", 5.0, None), boom, clock, None, AgentMetrics(), logs.append)
    agent.run(cycles=3)
    assert len(calls) == 3 and logs[0] == "check cycle failed: RuntimeError: sensor exploded"
    assert agent.metrics.registry.get_sample_value("minutiae_node_status") == 3


def test_corrupt_state_files_are_reported_not_fatal(tmp_path):
    sd = tmp_path / "state"
    sd.mkdir()
    (sd / "outbox.jsonl").write_bytes(b"\xff{not json\n")
    (sd / "agent.json").write_text("[1,")
    logs: list[str] = []
    clock = FakeClock()
    Agent(AgentConfig("gpu013", 5.0, sd), fake_check(clock), clock, None, AgentMetrics(),
          logs.append)
    assert logs[0].startswith(f"{sd / 'outbox.jsonl'}: outbox unreadable")
    assert logs[1].startswith(f"{sd / 'agent.json'}: unreadable")


def test_real_node_checks_on_a_captured_nvidia_smi(realdata, tmp_path):
    xml = realdata / "nvidia_smi/telegraf/a100-sxm4-v12.xml"
    if not xml.exists():
        pytest.skip(f"missing {xml}")
    clock = FakeClock()
    cfg = CheckConfig(sysfs_root=tmp_path / "nosys", kmsg=None, nvidia_smi_xml=xml,
                      use_nvml=False, node="gpu014", checks=("gpu",),
                      state_file=tmp_path / "check-state.json")
    agent = Agent(AgentConfig("gpu014", 10.0, tmp_path / "s"), lambda: run_check(cfg, clock),
                  clock, None, AgentMetrics(), log=lambda s: None)
    body = agent.run_once()
    [f] = body["checks"][0]["findings"]
    # the capture lists 1 GPU while <attached_gpus> says 4
    assert (f["kind"], f["severity"], f["action"]) == ("gpu_missing", "critical", "reboot")
    reg = agent.metrics.registry
    assert reg.get_sample_value("minutiae_check_status", {"check": "gpu"}) == 2
    assert reg.get_sample_value("minutiae_node_action") == 3


def test_agent_import_path_stays_light():
    code = ("import sys, minutiae.cli.main, minutiae.cli.agent, minutiae.agent.daemon, "
            "minutiae.node.check, minutiae.controller.wire; "
            "print(sorted(m for m in ('numpy', 'polars', 'fastapi', 'pydantic', 'scipy', "
            "'pyarrow', 'uvicorn', 'starlette', 'sqlite3') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parent)
    assert out.stdout.strip() == "[]"


def test_node_status_is_unknown_before_the_first_check_run() -> None:
    """A scrape between the agent's start and its first check run must not read 0 (OK): seen
    following docs/operations.md on a loaded host (the first scrape said OK, the report UNKNOWN)."""
    from prometheus_client import generate_latest

    text = generate_latest(AgentMetrics().registry).decode()
    assert "minutiae_node_status 3.0" in text.splitlines()


def test_agent_config_gets_expected_ib_ports(tmp_path, monkeypatch):
    """``minutiae agent --expected-ib-ports 0`` (the shared option table): its check config
    carries the value, and on the real H200 VM (no InfiniBand) its ib check is then OK."""
    import minutiae.agent.daemon as daemon
    from minutiae.cli.main import main

    seen = []
    monkeypatch.setattr(daemon, "run_agent", seen.append)
    h200 = Path(__file__).resolve().parents[1] / "data" / "h200" / "sysfs" / "sys"
    assert main(["agent", "--no-nvml", "--kmsg", "", "--metrics-listen", "", "--sysfs-root", str(h200),
                 "--state-dir", str(tmp_path), "--expected-ib-ports", "0"]) == 0
    [options] = seen
    cfg = daemon.check_config(options, "h200", tmp_path)
    assert cfg.expected_ib_ports == 0
    ib = run_check(cfg, FakeClock()).result("ib")
    assert ib is not None and ib.status is Status.OK and ib.findings == ()
    # without the option the agent's config has none, and the VM's ib check is UNKNOWN
    seen.clear()
    assert main(["agent", "--no-nvml", "--kmsg", "", "--metrics-listen", "", "--sysfs-root", str(h200),
                 "--state-dir", str(tmp_path)]) == 0
    cfg = daemon.check_config(seen[0], "h200", tmp_path)
    assert cfg.expected_ib_ports is None
    assert run_check(cfg, FakeClock()).result("ib").status is Status.UNKNOWN

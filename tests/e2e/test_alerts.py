"""deploy/prometheus: the alert and recording rules pass `promtool check rules` and their unit
tests (`promtool test rules`, one per alert, firing and not firing), the PrometheusRule manifest
carries the same groups, every series they read is documented, and end to end a real
Alertmanager delivers the firing MinutiaeAgentDown to a webhook when a real agent is killed
(our own Prometheus with the shipped rules; the shared one is not reconfigured)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from minutiae.testing.serve import free_port
from prom_helpers import (
    METRICS_MD,
    ROOT,
    RULES,
    PrivatePrometheus,
    agent,
    need_binary,
    query,
    stop,
    wait_for,
)

TESTS = ROOT / "deploy" / "prometheus" / "tests"
MANIFEST = ROOT / "deploy" / "kubernetes" / "monitoring" / "prometheusrule.yaml"
RULE_FILES = [RULES / "alerts.yaml", RULES / "records.yaml"]


def groups(path: Path) -> list[dict[str, Any]]:
    return list(yaml.safe_load(path.read_text())["groups"])


def alerts() -> list[dict[str, Any]]:
    return [r for g in groups(RULES / "alerts.yaml") for r in g["rules"]]


# -- promtool ---------------------------------------------------------------------------------

def test_promtool_check_rules() -> None:
    promtool = need_binary("promtool")
    out = subprocess.run([promtool, "check", "rules", *map(str, RULE_FILES)],  # noqa: S603
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    n_alerts = len(alerts())
    n_records = sum(len(g["rules"]) for g in groups(RULES / "records.yaml"))
    assert f"SUCCESS: {n_alerts} rules found" in out.stdout
    assert f"SUCCESS: {n_records} rules found" in out.stdout


def test_promtool_unit_tests_pass() -> None:
    promtool = need_binary("promtool")
    files = sorted(TESTS.glob("*_test.yaml"))
    out = subprocess.run([promtool, "test", "rules", *map(str, files)],  # noqa: S603
                         capture_output=True, text=True, cwd=TESTS)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == len(files)


def test_the_example_alertmanager_config_is_valid() -> None:
    amtool = need_binary("amtool")
    out = subprocess.run([amtool, "check-config",  # noqa: S603
                          str(ROOT / "deploy/prometheus/alertmanager.yml")],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    cases: dict[str, list[bool]] = {}
    for f in TESTS.glob("*_test.yaml"):
        for t in yaml.safe_load(f.read_text())["tests"]:
            for a in t.get("alert_rule_test", []):
                cases.setdefault(a["alertname"], []).append(bool(a.get("exp_alerts")))
    for rule in alerts():
        got = cases.get(rule["alert"], [])
        assert True in got and False in got, f"{rule['alert']}: needs a firing and a quiet case"
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_issue_s_alerts_are_there() -> None:
    assert {"MinutiaeAgentDown", "MinutiaeNodeSilent", "MinutiaeNodesSilent",
            "MinutiaeSchedulerUnreachable", "MinutiaeBreakerTripped", "MinutiaePausedTooLong",
            "MinutiaeDrainRateHigh", "MinutiaeNoLeader",
            "MinutiaeActionFailures"} <= {r["alert"] for r in alerts()}


def test_prometheusrule_manifest_carries_the_same_groups() -> None:
    doc = yaml.safe_load(MANIFEST.read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert doc["metadata"]["namespace"] == "minutiae"
    assert doc["spec"]["groups"] == [g for f in RULE_FILES for g in groups(f)]
    kustom = yaml.safe_load((MANIFEST.parent / "kustomization.yaml").read_text())
    assert sorted(kustom["resources"]) == sorted(p.name for p in MANIFEST.parent.glob("*.yaml")
                                                 if p.name != "kustomization.yaml")


def test_every_series_the_rules_read_is_documented() -> None:
    doc = METRICS_MD.read_text()
    for f in RULE_FILES:
        for name in set(re.findall(r"minutiae_[a-z0-9_]+", f.read_text())):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert f"`{name}`" in doc or f"`{base}`" in doc, f"{f.name}: {name} not in METRICS.md"


# -- end to end: a killed agent pages through a real Alertmanager -----------------------------

class Webhook:
    """A tiny receiver for Alertmanager's webhook: keeps every payload it is sent."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.payloads: list[dict[str, Any]] = []
        received = self.payloads

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                n = int(self.headers.get("content-length", "0"))
                received.append(json.loads(self.rfile.read(n)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        try:
            self.server = ThreadingHTTPServer((parts.hostname or "127.0.0.1", parts.port or 80),
                                              Handler)
        except OSError as exc:
            pytest.fail(f"cannot listen on {url} for Alertmanager's webhook: {exc}")
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def alerts(self, name: str, instance: str, status: str) -> list[dict[str, Any]]:
        return [a for p in list(self.payloads) for a in p["alerts"]
                if a["labels"].get("alertname") == name
                and a["labels"].get("instance") == instance and a["status"] == status]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(Alertmanager URL, its webhook URL): the one `make services` started, else one started
    here by the same script on free ports."""
    url, hook = (os.environ.get("MINUTIAE_ALERTMANAGER_URL"),
                 os.environ.get("MINUTIAE_ALERTMANAGER_WEBHOOK"))
    if url and hook:
        yield url, hook
        return
    need_binary("alertmanager")
    port = free_port()
    hook = f"http://127.0.0.1:{free_port()}/alerts"
    d = tmp_path / "alertmanager"
    subprocess.run([str(ROOT / "scripts/services/alertmanager-up.sh"), str(d), str(port),  # noqa: S603
                    hook], check=True)
    try:
        yield f"http://127.0.0.1:{port}", hook
    finally:
        subprocess.run(["kill", (d / "alertmanager.pid").read_text().strip()],  # noqa: S603,S607
                       check=False)


@pytest.mark.prometheus
@pytest.mark.slow
def test_a_killed_agent_fires_agent_down_at_the_alertmanager_webhook(
        alertmanager: tuple[str, str], realdata: Path, tmp_path: Path) -> None:
    am_url, hook_url = alertmanager
    try:
        httpx.get(f"{am_url}/-/ready", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(f"Alertmanager at {am_url} is down: {exc}")
    need_binary("prometheus")
    xml = realdata / "nvidia_smi/telegraf/a100-sxm4-v12.xml"
    hook = Webhook(hook_url)
    proc, inst = agent("gpu051", xml, tmp_path)
    try:
        with PrivatePrometheus(tmp_path, {"minutiae-agent": [inst]}, am_url) as prom:
            wait_for(f"our Prometheus to scrape the agent on {inst}",
                     lambda: query(prom.url, f'up{{instance="{inst}"}} == 1'), 30)
            rules = httpx.get(f"{prom.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
            assert {g["name"] for g in rules} == {"minutiae.alerts", "minutiae.records"}
            stop(proc)                                        # the agent dies
            killed = time.monotonic()
            [got] = wait_for("MinutiaeAgentDown at the webhook",
                             lambda: hook.alerts("MinutiaeAgentDown", inst, "firing"), 150)
            waited = time.monotonic() - killed
            assert waited > 55, f"fired after {waited:.0f} s: the rule's `for: 1m` was ignored"
            assert got["labels"]["severity"] == "critical"
            assert got["labels"]["job"] == "minutiae-agent"
            assert got["annotations"]["summary"] == f"minutiae agent {inst} is down"
            active = httpx.get(f"{am_url}/api/v2/alerts", timeout=10,
                               params={"filter": f'instance="{inst}"'}).json()
            assert [a["labels"]["alertname"] for a in active] == ["MinutiaeAgentDown"]
            # the agent comes back on the same port: the alert resolves
            proc = subprocess.Popen(same_argv(proc), stdout=subprocess.DEVNULL,  # noqa: S603
                                    stderr=subprocess.STDOUT)
            wait_for("the resolved MinutiaeAgentDown at the webhook",
                     lambda: hook.alerts("MinutiaeAgentDown", inst, "resolved"), 60)
    finally:
        stop(proc)
        hook.close()


def same_argv(proc: subprocess.Popen[bytes]) -> list[str]:
    args = proc.args
    assert isinstance(args, list)
    return [str(a) for a in args]

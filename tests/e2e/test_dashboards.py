"""deploy/grafana: the dashboards are importable Grafana JSON (datasource variable, current
schemaVersion, unique panel ids, no overlapping panels), and EVERY panel's PromQL runs against
the real Prometheus (MINUTIAE_PROM_URL) scraping a real `minutiae agent` and `minutiae serve`
started here: each query parses, reads only series our agent and controller export, and returns
series from our targets (the test makes the events the panels count: a drain, a hold, a refused
push)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from minutiae.testing.serve import ServeProcess
from prom_helpers import (
    GRAFANA,
    agent,
    expand,
    exported,
    names,
    query,
    recording_rules,
    scoped,
    shared_targets,
    stop,
    wait_for,
)

DASHBOARDS = sorted(GRAFANA.glob("*.json"))
# Grafana's built-in interval variables and ours, as Grafana would substitute them
VARIABLES = {"$__rate_interval": "15s", "$__interval": "15s", "$__range": "1m",
             "$instance": ".*"}


def panels(d: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))       # a collapsed row keeps its panels inside
    return [p for p in out if p["type"] != "row"]


def exprs() -> list[tuple[str, str, str]]:
    return [(f.name, p["title"], t["expr"]) for f in DASHBOARDS
            for p in panels(json.loads(f.read_text())) for t in p["targets"]]


def substitute(q: str) -> str:
    for var, value in VARIABLES.items():
        q = q.replace(var, value)
    assert "$" not in q, f"unknown variable in {q}"
    return q


# -- static: importable JSON ------------------------------------------------------------------

def test_there_are_the_dashboards_the_issue_names() -> None:
    titles = {p["title"] for f in DASHBOARDS for p in json.loads(f.read_text())["panels"]
              if p["type"] == "row"}
    assert {"Fleet health", "Drains and resumes", "Budget and breaker",
            "Ingest and decision latency", "Agent footprint per node",
            "Top rules firing"} <= titles


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_importable_grafana_json(path: Path) -> None:
    d = json.loads(path.read_text())
    assert d["schemaVersion"] >= 41 and d["uid"].startswith("minutiae-") and d["title"]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
    for p in panels(d):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}" and t["expr"].strip()


def test_every_recorded_series_a_panel_reads_has_a_rule() -> None:
    records = recording_rules()
    for _, title, q in exprs():
        expand(q, records)                      # asserts, naming the panel's query
        assert title


# -- live: every panel against the real Prometheus --------------------------------------------

@pytest.mark.prometheus
@pytest.mark.slow
def test_every_panel_query_runs_against_the_real_prometheus(prom_url: str, prom_targets: str,
                                                            realdata: Path,
                                                            tmp_path: Path) -> None:
    try:
        httpx.get(f"{prom_url}/-/ready", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(f"Prometheus at {prom_url} is down: {exc}")
    critical = realdata / "nvidia_smi/telegraf/a100-sxm4-v12.xml"     # 1 of 4 GPUs listed
    token = "dashboards-test-token"
    with ServeProcess(tmp_path / "ctl", token, "--interval", "1") as ctl:
        fleet_of_twenty(ctl)    # so the shipped budget lets the controller drain one node
        a1, inst1 = agent("gpu041", critical, tmp_path, controller=ctl.url, token=token)
        # an agent with the wrong token: its pushes fail (401) and the controller counts refusals
        a2, inst2 = agent("gpu042", critical, tmp_path, controller=ctl.url, token="wrong")
        inst_ctl = ctl.url.removeprefix("http://")
        ours = [inst1, inst2, inst_ctl]
        groups = [{"targets": [inst1, inst2], "labels": {"job": "minutiae-agent"}},
                  {"targets": [inst_ctl], "labels": {"job": "minutiae-controller"}}]
        try:
            with shared_targets(prom_targets, groups) as ensure:
                def all_up() -> bool:
                    ensure()
                    got = query(prom_url, scoped("up == 1", ours))
                    return len(got) == 3
                wait_for(f"Prometheus at {prom_url} to scrape {ours}", all_up, 60)
                # both outcomes pushed and a few scrapes for the rate() windows
                wait_for("a failed and an accepted push",
                         lambda: ensure() or query(prom_url, scoped(
                             'minutiae_agent_push_total{outcome="failed"} > 0', ours))
                         and query(prom_url, scoped(
                             'minutiae_agent_push_total{outcome="ok"} > 0', ours)), 30)
                wait_for("the controller's (dry-run) drain of gpu041",
                         lambda: any(r["node"] == "gpu041" and r.get("would")
                                     for r in httpx.get(f"{ctl.url}/v1/nodes").json()), 30)
                hold_one(ctl)   # paused: the next unhealthy node's drain is held
                time.sleep(3)
                live = (exported(f"http://{inst1}") | exported(f"http://{inst2}")
                        | exported(ctl.url) | {"up"})
                check_panels(prom_url, ours, live)
        finally:
            stop(a1)
            stop(a2)


def fleet_of_twenty(ctl: ServeProcess) -> None:
    """Twenty healthy nodes reported through the API (the shipped budget: 10 % may drain)."""
    with httpx.Client(timeout=10) as c:
        for i in range(1, 21):
            r = c.post(f"{ctl.url}/v1/reports", headers=ctl.headers, json={
                "node": f"gpu{i:03d}", "status": "ok",
                "checks": [{"check": "gpu", "status": "ok", "findings": []}]})
            assert r.status_code == 202, r.text


def hold_one(ctl: ServeProcess) -> None:
    """Pause, then an unhealthy report: the controller holds the drain it wants (verb=hold)."""
    xid = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
           "message": "GPU has fallen off the bus"}
    with httpx.Client(timeout=10) as c:
        assert c.post(f"{ctl.url}/v1/pause", headers=ctl.headers,
                      json={"reason": "dashboards test"}).status_code == 200
        assert c.post(f"{ctl.url}/v1/reports", headers=ctl.headers, json={
            "node": "gpu020", "status": "critical",
            "checks": [{"check": "gpu", "status": "critical", "findings": [xid]}]}
        ).status_code == 202
    wait_for("the held drain of gpu020", lambda: any(
        a["action"] == "hold" for a in httpx.get(
            f"{ctl.url}/v1/audit", params={"node": "gpu020"}).json()), 30)


def check_panels(prom_url: str, ours: list[str], live: set[str]) -> None:
    records = recording_rules()
    empty, unexported, ran = [], [], 0
    for dash, title, raw in exprs():
        q = expand(substitute(raw), records)
        query(prom_url, q)                               # parses (fleet-wide, as Grafana runs it)
        ran += 1
        unexported += [(dash, title, n) for n in names(q) if n not in live]
        if not query(prom_url, scoped(q, ours)):
            empty.append((dash, title, raw))
    assert ran == len(exprs()) and ran >= 30
    assert not unexported, f"panels read series our agent and controller do not export: " \
        f"{unexported}"
    assert not empty, f"panels with no series from our agent and controller: {empty}"


def test_scoping_restricts_every_selector() -> None:
    q = scoped('sum by (why) (rate(minutiae_controller_refused_total[5m])) + up{job="x"}'
               ' - time() + minutiae_agent_rss_bytes', ["127.0.0.1:1"])
    m = 'instance=~"127\\\\.0\\\\.0\\\\.1:1"'
    assert q == (f"sum by (why) (rate(minutiae_controller_refused_total{{{m}}}[5m])) + "
                 f'up{{{m}, job="x"}} - time() + minutiae_agent_rss_bytes{{{m}}}')
    assert names(q) == {"minutiae_controller_refused_total", "up", "minutiae_agent_rss_bytes"}
    assert re.fullmatch(r"\(.*\)", expand("minutiae:agents_up:sum", recording_rules()))


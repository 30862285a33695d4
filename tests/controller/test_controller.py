"""The controller service + HTTP API in process, with RecordingBackend and FakeClock: auth,
validation, drain → audit → explain, dry-run, unreachable scheduler, crash recovery, flood."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.reconcile import reconcile
from minutiae.controller.service import Controller
from minutiae.controller.state import FleetState, NodeView, Verb
from minutiae.controller.store import Store
from minutiae.controller.wire import report_from_json
from minutiae.model import Action
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "t0ken-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ACT = replace(load_policy(), dry_run=False)
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus",
         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                 "GPU has fallen off the bus."}


def report(node, findings=(), status=None, rack="r1"):
    return {"node": node, "status": status or ("critical" if findings else "ok"),
            "checks": [{"check": "gpu", "status": status or ("critical" if findings else "ok"),
                        "findings": list(findings)}],
            "domains": {"rack": rack, "nvl_domain": f"nvl-{node}"}}


@pytest.fixture
def world(tmp_path):
    clock = FakeClock()
    backend = RecordingBackend(name="slurm")
    for i in range(1, 31):
        backend.add_node(f"gpu{i:03d}")
    ctl = Controller(Store(tmp_path / "c.db"), backend, ACT, clock)
    client = TestClient(make_app(ctl, TOKEN))
    for i in range(1, 31):
        assert client.post("/v1/reports", json=report(f"gpu{i:03d}"), headers=AUTH).status_code == 202
    return ctl, backend, clock, client


def test_requests_without_the_token_are_refused(world):
    ctl, backend, _, client = world
    for path, body in [("/v1/reports", report("gpu001", [XID79])), ("/v1/pause", {"reason": "x"}),
                       ("/v1/unpause", None), ("/v1/timings", {"job": "1", "steps": []})]:
        assert client.post(path, json=body).status_code == 401
        assert client.post(path, json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
        assert client.post(path, json=body,
                           headers={"Authorization": f"Bearer {TOKEN}x"}).status_code == 401
    ctl.step()
    assert backend.calls == [] and ctl.memory.pause is None


@pytest.mark.parametrize("name", ["gpu001; scontrol update NodeName=ALL State=DOWN", "$(reboot)",
                                  "gpu`id`", "-rf", "gpu001 State=DOWN", "../etc", "", "a" * 80])
def test_injection_like_node_names_are_rejected(world, name):
    ctl, backend, _, client = world
    r = client.post("/v1/reports", json=report(name, [XID79]), headers=AUTH)
    assert r.status_code == 422
    assert ctl.counters.rejected >= 1 or r.json()["detail"]
    ctl.step()
    assert backend.calls == []


def test_pause_reason_is_sanitised_and_holds_actions(world):
    ctl, backend, _, client = world
    r = client.post("/v1/pause", json={"reason": "rollout `rm -rf /`; $(x)"}, headers=AUTH)
    assert r.json()["reason"] == "minutiae: rollout rm -rf / (x)"
    client.post("/v1/reports", json=report("gpu002", [XID79]), headers=AUTH)
    plan = ctl.step()
    assert [(d.action, d.budget.check) for d in plan] == [(Verb.HOLD, "paused")]
    assert backend.calls == []
    client.post("/v1/unpause", headers=AUTH)
    ctl.step()
    assert [c.op for c in backend.calls] == ["drain"]


def test_critical_report_drains_and_explain_says_why_and_how_to_undo(world):
    ctl, backend, clock, client = world
    client.post("/v1/reports", json=report("gpu004", [XID79]), headers=AUTH)
    assert ctl.wake.is_set()
    ctl.step()
    assert [(c.op, c.node, c.arg) for c in backend.calls] == [
        ("drain", "gpu004", "minutiae[default/controller]: needs-remediation xid 79 step=reboot")]
    ex = client.get("/v1/nodes/gpu004/explain").json()
    assert ex["why"] == "drained by minutiae: rule needs-remediation"
    assert ex["last_action"]["evidence"] == [
        "[critical/reboot] xid 79 0000:3b:00.0: " + XID79["line"]]
    assert ex["last_action"]["budget"]["allowed"] is True
    assert ex["last_action"]["status"] == "done"
    # the undo is minutiae resolve (acknowledges the evidence; else it drains again at once);
    # the scheduler's own command is the secondary hint
    assert ex["undo"] == "minutiae resolve gpu004 --now --reason 'fixed: <what was done>'"
    assert ex["scheduler_undo"] == "scontrol update NodeName=gpu004 State=RESUME"
    audit = client.get("/v1/audit", params={"node": "gpu004"}).json()
    assert [(a["action"], a["status"]) for a in audit] == [("drain", "done")]
    nodes = {n["node"]: n for n in client.get("/v1/nodes").json()}
    assert nodes["gpu004"]["health"] == "unhealthy" and nodes["gpu004"]["ours"]
    # healthy again: resumed only after the healthy delay
    clock.advance(5)
    client.post("/v1/reports", json=report("gpu004"), headers=AUTH)
    ctl.step()
    clock.advance(ACT.healthy_delay_s)
    for i in range(1, 31):
        client.post("/v1/reports", json=report(f"gpu{i:03d}"), headers=AUTH)
    ctl.step()
    assert [c.op for c in backend.calls] == ["drain", "resume"]


def test_admin_drain_explained_and_left_alone(world):
    ctl, backend, _, client = world
    backend.admin_drain("gpu006", "PSU swap INC-881")
    client.post("/v1/reports", json=report("gpu006", [XID79]), headers=AUTH)
    ctl.step()
    ex = client.get("/v1/nodes/gpu006/explain").json()
    assert ex["why"].startswith("drained by someone else (reason 'PSU swap INC-881')")
    assert backend.calls == []


def test_dry_run_touches_nothing_and_does_not_repeat(tmp_path):
    clock = FakeClock()
    backend = RecordingBackend(name="slurm")
    for i in range(1, 21):
        backend.add_node(f"gpu{i:03d}")
    ctl = Controller(Store(tmp_path / "d.db"), backend, load_policy(), clock)
    assert ctl.dry_run
    for i in range(2, 21):
        ctl.ingest(report(f"gpu{i:03d}"))
    ctl.ingest(report("gpu001", [XID79]))
    plan = ctl.step()
    assert [d.action for d in plan] == [Verb.DRAIN] and plan.decisions[0].undo.startswith(
        "nothing to undo: dry-run")
    for _ in range(3):
        clock.advance(10)
        ctl.ingest(report("gpu001", [XID79]))
        assert not ctl.step().decisions
    assert backend.calls == []
    rows = ctl.store.audit(node="gpu001")
    assert [(r.action, r.status) for r in rows] == [("drain", "dry_run")]


def test_scheduler_unreachable_is_said_and_nothing_is_lost(world):
    ctl, backend, clock, client = world
    backend.unreachable = True
    client.post("/v1/reports", json=report("gpu008", [XID79]), headers=AUTH)
    plan = ctl.step()
    assert not plan.acting()
    st = client.get("/v1/status").json()
    assert any("scheduler unreachable" in p["what"] for p in st["problems"])
    backend.unreachable = False
    clock.advance(1)
    client.post("/v1/reports", json=report("gpu008", [XID79]), headers=AUTH)
    ctl.step()
    assert [(c.op, c.node) for c in backend.calls] == [("drain", "gpu008")]


def test_pending_actions_are_finished_once_after_a_crash(tmp_path):
    """Simulate kill -9 between "audit written" and "scheduler called": a fresh controller on
    the same store completes the pending ones, and confirms (not redoes) those already done."""
    clock = FakeClock()
    backend = RecordingBackend(name="slurm")
    names = [f"gpu{i:03d}" for i in range(1, 41)]
    for n in names:
        backend.add_node(n)
    store = Store(tmp_path / "crash.db")
    ctl = Controller(store, backend, ACT, clock)
    for n in names:
        ctl.ingest(report(n, [XID79] if n in ("gpu001", "gpu002", "gpu003") else (),
                          rack=f"r{n}"))
    views = {n: NodeView(n, r, backend.state(n), ctl.intake.domains[n])
             for n, r in ctl.intake.reports.items()}
    plan = reconcile(FleetState(views, ctl.memory, "slurm"), ACT, clock.now())
    assert [d.node for d in plan.acting()] == ["gpu001", "gpu002", "gpu003"]
    ids = store.begin_batch(plan.memory, ctl.memory, plan.decisions, False)
    backend.drain("gpu001", plan.decisions[0].reason)     # the first one ran, then the crash
    store.close()
    ctl2 = Controller(Store(tmp_path / "crash.db"), backend, ACT, clock)
    handled = ctl2.retry_pending()
    assert [r.id for r in handled] == ids
    assert [c.node for c in backend.calls if c.op == "drain"] == ["gpu001", "gpu002", "gpu003"]
    rows = {r.node: r for r in ctl2.store.audit()}
    assert rows["gpu001"].detail == "confirmed on restart: already drained"
    assert rows["gpu002"].detail == rows["gpu003"].detail == "completed on restart"
    assert ctl2.memory.nodes["gpu002"].drained_at == clock.now()
    ctl2.step()                                            # memory survived: nothing redone
    assert len([c for c in backend.calls if c.op == "drain"]) == 3


def test_report_flood_and_garbage_keep_the_controller_going(world):
    ctl, backend, _, client = world
    before = ctl.counters.reports
    for k in range(300):
        client.post("/v1/reports", json=report(f"gpu{k % 30 + 1:03d}"), headers=AUTH)
    for bad in [b"{", b"\xff\xfe", b"[]", b'{"node": "gpu001", "status": "meh"}',
                b'{"node": "gpu001", "status": "ok", "checks": [{"check": "x", "status": "ok", '
                b'"findings": [{"kind": "xid", "severity": "apocalyptic"}]}]}']:
        r = client.post("/v1/reports", content=bad, headers={**AUTH, "content-type": "application/json"})
        assert r.status_code == 422, bad
    big = client.post("/v1/reports", content=b"x" * (2 << 20),
                      headers={**AUTH, "content-type": "application/json"})
    assert big.status_code == 413
    assert ctl.counters.reports == before + 300
    ctl.step()
    assert client.get("/v1/status").json()["nodes"] == 30


def test_wire_parser_never_crashes_on_garbage():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from minutiae.errors import MinutiaeError

    json_val = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                            lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(), c,
                                                                               max_size=4),
                            max_leaves=20)

    @settings(max_examples=300, deadline=None)
    @given(st.dictionaries(st.sampled_from(["node", "status", "checks", "findings", "domains"]),
                           json_val))
    def run(d):
        with contextlib.suppress(MinutiaeError):
            report_from_json(d, 0.0)

    run()


def test_real_kernel_log_capture_drains_through_the_policy(realdata, tmp_path):
    """A real dmesg with XID 119 (GSP timeout) read by the real node checks, sent as the agent
    would: the controller drains with the rule that matched and the captured line as evidence."""
    from minutiae.node.check import CheckConfig, run_check

    log = realdata / "kernel_logs/gpud/components_accelerator_nvidia_xid__dmesg-with-xid-119.log"
    if not log.exists():
        pytest.skip(f"missing {log}")
    clock = FakeClock()
    rep = run_check(CheckConfig(sysfs_root=tmp_path / "nosys", kmsg=log, use_nvml=False,
                                node="gpu020", checks=("kernel_log",)), clock)
    backend = RecordingBackend(name="slurm")
    ctl = Controller(Store(tmp_path / "k.db"), backend, ACT, clock)
    for i in range(1, 31):
        backend.add_node(f"gpu{i:03d}")
        ctl.ingest(report(f"gpu{i:03d}"))
    ctl.ingest({**rep.to_json(), "domains": {"rack": "r9"}})
    [d] = ctl.step().acting()
    assert (d.node, d.action, d.rule, d.step) == ("gpu020", Verb.DRAIN, "needs-remediation",
                                                  Action.RESET_GPU)
    assert any(e.startswith("[error/reset_gpu] xid 119") and "NVRM: Xid" in e
               for e in d.evidence)
    assert backend.nodes["gpu020"].reason == d.reason


def test_reports_survive_a_restart_with_their_arrival_time(tmp_path):
    clock = FakeClock()
    backend = RecordingBackend(name="slurm")
    backend.add_node("gpu001")
    ctl = Controller(Store(tmp_path / "r.db"), backend, ACT, clock)
    body = {**report("gpu001", [XID79]), "agent": {"seq": 9, "age_s": 30.0}}
    rep = ctl.ingest(body)
    assert rep.time == clock.now() - 30.0
    ctl.step()                                    # written behind at the step
    clock.advance(50)
    ctl2 = Controller(Store(tmp_path / "r.db"), backend, ACT, clock)
    assert ctl2.intake.reports["gpu001"].time == rep.time
    assert [f.code for f in ctl2.intake.reports["gpu001"].findings] == [79]
    older = {**report("gpu001"), "agent": {"age_s": 120.0}}      # from an outbox: older
    ctl2.ingest(older)
    assert ctl2.intake.reports["gpu001"].findings                      # the newer one is kept


def test_controller_metrics_count_reports_refusals_and_health(world):
    ctl, _, _, client = world
    client.post("/v1/reports", json=report("gpu003", [XID79]), headers=AUTH)
    client.post("/v1/reports", json=report("gpu003"))                      # no token
    ctl.step()
    text = client.get("/metrics").text
    assert "minutiae_controller_reports_total 31.0" in text
    assert 'minutiae_controller_refused_total{why="token"} 1.0' in text
    assert 'minutiae_controller_nodes{health="unhealthy"} 1.0' in text
    assert 'minutiae_controller_actions{outcome="done"} 1.0' in text
    assert "minutiae_controller_paused 0.0" in text


def test_openapi_documents_every_endpoint(world):
    _, _, _, client = world
    spec = client.get("/openapi.json").json()
    assert {"/v1/reports", "/v1/timings", "/v1/pause", "/v1/unpause", "/v1/status", "/v1/nodes",
            "/v1/nodes/{node}/explain", "/v1/audit"} <= set(spec["paths"])
    body = spec["paths"]["/v1/reports"]["post"]["requestBody"]["content"]["application/json"]
    assert [s["$ref"].rsplit("/", 1)[1] for s in body["schema"]["oneOf"]] == ["ReportIn",
                                                                              "HeartbeatIn"]
    assert spec["components"]["schemas"]["HeartbeatIn"]["required"] == ["node", "digest"]
    assert "findings" in spec["components"]["schemas"]["CheckIn"]["properties"]

"""Jobs at the controller: per-job tolerance set through the API (stored, used by the budget,
surviving a restart) and job step timings recorded as runs in the run history."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.state import Verb
from minutiae.controller.store import Store
from minutiae.history.store import RunStore
from minutiae.schedulers.recording import RecordingBackend
from minutiae.schedulers.slurm.backend import parse_job_tolerances
from minutiae.testing import FakeClock

TOKEN = "t0ken-for-jobs-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
POLICY = replace(load_policy(), dry_run=False)
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "message": "GPU has fallen off the bus"}
JOB_NODES = ("gpu001", "gpu002", "gpu003")


def report(node, findings=()):
    return {"node": node, "status": "critical" if findings else "ok",
            "checks": [{"check": "gpu", "status": "critical" if findings else "ok",
                        "findings": list(findings)}],
            "domains": {"rack": f"r-{node}", "nvl_domain": f"nvl-{node}"}}


def make_world(tmp_path, backend):
    """30 nodes on ``backend`` (job 77 on JOB_NODES) behind a controller and its API."""
    clock = FakeClock()
    for i in range(1, 31):
        n = f"gpu{i:03d}"
        backend.add_node(n, jobs=("77",) if n in JOB_NODES else ())
    ctl = Controller(Store(tmp_path / "c.db"), backend, POLICY, clock)
    return ctl, backend, clock, TestClient(make_app(ctl, TOKEN)), tmp_path


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path, RecordingBackend(name="slurm"))


def drained(backend):
    return [c.node for c in backend.calls if c.op == "drain"]


def test_job_tolerance_from_the_api_is_stored_and_used_by_the_budget(world):
    ctl, backend, clock, client, tmp = world
    for i in range(1, 31):
        n = f"gpu{i:03d}"
        client.post("/v1/reports", json=report(n, [XID79] if n in JOB_NODES else ()),
                    headers=AUTH)
    ctl.step()
    assert drained(backend) == ["gpu001"]                  # the policy default: 1 per job
    r = client.put("/v1/jobs/77/tolerance", json={"nodes": 2}, headers=AUTH)
    assert r.status_code == 200 and r.json() == {"job": "77", "tolerance": 2}
    clock.advance(10)
    plan = ctl.step()
    assert drained(backend) == ["gpu001", "gpu002"]
    (hold,) = [d for d in plan.decisions if d.action is Verb.HOLD]
    assert hold.node == "gpu003" and hold.budget.check == "job"
    assert hold.budget.detail == "job 77 already lost 2 node(s); it survives 2"
    ex = client.get("/v1/nodes/gpu003/explain").json()   # the hold is audited afresh
    assert ex["last_hold"]["budget"]["detail"] == "job 77 already lost 2 node(s); it survives 2"
    assert client.get("/v1/jobs").json() == {"tolerance": {"77": 2}, "from_scheduler": {},
                                             "default": 1}
    # kept in the store: a restarted controller uses it
    ctl2 = Controller(Store(tmp / "c.db"), backend, POLICY, clock)
    assert ctl2.tolerances() == {"77": 2}
    assert client.delete("/v1/jobs/77/tolerance", headers=AUTH).json()["tolerance"] is None
    assert Controller(Store(tmp / "c.db"), backend, POLICY, clock).tolerances() == {}


def test_job_tolerance_needs_the_token_and_a_valid_job_and_count(world):
    ctl, _, _, client, _ = world
    assert client.put("/v1/jobs/77/tolerance", json={"nodes": 2}).status_code == 401
    assert client.delete("/v1/jobs/77/tolerance").status_code == 401
    bad = client.put("/v1/jobs/$(reboot)/tolerance", json={"nodes": 2}, headers=AUTH)
    assert bad.status_code == 422 and "invalid job id" in bad.json()["detail"]
    assert client.put("/v1/jobs/77/tolerance", json={"nodes": -1},
                      headers=AUTH).status_code == 422
    assert client.put("/v1/jobs/77/tolerance", json={"nodes": "x"},
                      headers=AUTH).status_code == 422
    assert ctl.tolerances() == {}


def test_timings_are_recorded_as_a_run_in_the_history(world):
    ctl, _, clock, client, tmp = world
    steps = []
    for s in range(30):
        for rank, node in enumerate(("gpu001", "gpu002", "gpu003")):
            sec = 1.0 + 0.01 * (s % 3) + (0.2 if rank == 2 and s >= 15 else 0.0)
            steps.append({"step": s, "rank": rank, "node": node, "seconds": sec})
    r = client.post("/v1/timings", json={"job": "4242", "steps": steps[:45],
                                         "signature": "llama/tp8", "start": 1000.0,
                                         "versions": {"driver": ["570.158.01"]}}, headers=AUTH)
    assert r.status_code == 202, r.text
    r = client.post("/v1/timings", json={"job": "4242", "steps": steps[45:],
                                         "signature": "llama/tp8", "start": 1000.0,
                                         "versions": {"driver": ["570.158.01"]}}, headers=AUTH)
    out = r.json()
    assert out["accepted"] == 45
    per_step = {}
    for t in steps:
        per_step[t["step"]] = max(per_step.get(t["step"], 0.0), t["seconds"])
    expected = statistics.median(per_step[s] for s in range(10, 30))   # 10 warm-up steps
    assert out["run"] == {"run_id": "4242", "signature": "llama/tp8",
                          "seconds_per_step": pytest.approx(expected), "nodes": 3, "gpus": 3}
    with RunStore(tmp / "c.db") as runs:                    # the controller's own database
        (run,) = runs.load()
    assert run.run_id == "4242" and run.time == 1000.0 and run.value == pytest.approx(expected)
    assert run.nodes == ("gpu001", "gpu002", "gpu003")
    assert run.attrs == {"driver": frozenset({"570.158.01"})}
    assert ctl.store.count_timings("4242") == 90


def test_unusable_timings_are_kept_and_say_why_no_run_was_recorded(world):
    _, _, _, client, tmp = world
    r = client.post("/v1/timings", json={"job": "9", "steps": [{"step": 1, "seconds": 0.0}]},
                    headers=AUTH)
    assert r.status_code == 202
    assert r.json()["run"] is None and "no usable step timings" in r.json()["run_note"]
    with RunStore(tmp / "c.db") as runs:
        assert runs.count() == 0
    assert client.post("/v1/timings", json={"job": "a b", "steps": []},
                       headers=AUTH).status_code == 422


def test_slurm_job_comments_give_tolerances():
    text = ("4242|minutiae:tolerance=2\n4243|(null)\n4244|ckpt hourly, minutiae:tolerance=0\n"
            "4245_3|minutiae:tolerance=5 owner=ml\n4246|xminutiae:tolerance=9\n"
            "4247|minutiae:tolerance=-1\nnot-a-job|minutiae:tolerance=1\n4248\n")
    assert parse_job_tolerances(text) == {"4242": 2, "4244": 0, "4245_3": 5}


@given(st.text())
def test_job_comment_parser_never_crashes(text):
    for job, n in parse_job_tolerances(text).items():
        assert job.replace("_", "").isdigit() and n >= 0


class TolerantBackend(RecordingBackend):
    """The recording fake plus a scheduler that knows jobs' own tolerance."""

    def job_tolerances(self):
        return {"77": 2}


def test_the_schedulers_job_tolerance_is_used_and_the_api_overrides_it(tmp_path):
    ctl, backend, clock, client, _ = make_world(tmp_path, TolerantBackend(name="slurm"))
    for i in range(1, 31):
        n = f"gpu{i:03d}"
        client.post("/v1/reports", json=report(n, [XID79] if n in JOB_NODES else ()),
                    headers=AUTH)
    ctl.step()
    assert drained(backend) == ["gpu001", "gpu002"]
    assert client.get("/v1/jobs").json() == {"tolerance": {}, "from_scheduler": {"77": 2},
                                             "default": 1}
    client.put("/v1/jobs/77/tolerance", json={"nodes": 3}, headers=AUTH)
    clock.advance(5)
    ctl.step()
    assert drained(backend) == ["gpu001", "gpu002", "gpu003"]


def test_jobs_cli_sets_lists_and_forgets_tolerances(tmp_path):
    import subprocess
    import sys

    from minutiae.testing.serve import ServeProcess

    tok = tmp_path / "token"
    tok.write_text(TOKEN)
    cli = [sys.executable, "-m", "minutiae.cli.main", "jobs"]
    with ServeProcess(tmp_path / "ctl", TOKEN, "--backend", "dry-run") as ctl:
        def run(*args):
            return subprocess.run([*cli, "--controller", ctl.url, *args], capture_output=True,
                                  text=True, timeout=60)
        r = run("--tolerance", "4242=3", "--token-file", str(tok))
        assert r.returncode == 0, r.stderr
        assert "  4242: 3  set through the API" in r.stdout
        assert run("--tolerance", "4242=3").returncode == 3            # no token
        bad = run("--tolerance", "4242=x", "--token-file", str(tok))
        assert bad.returncode == 3 and "expected JOB=N" in bad.stderr
        inj = run("--tolerance", "$(reboot)=1", "--token-file", str(tok))
        assert inj.returncode == 3 and "invalid job id" in inj.stderr
        r = run("--forget", "4242", "--token-file", str(tok), "--json")
        assert r.returncode == 0 and '"tolerance": {}' in r.stdout

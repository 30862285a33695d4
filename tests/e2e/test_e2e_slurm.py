"""End to end with the real slurmctld (nodes gpu009-gpu040 only): real `minutiae agent` and
`minutiae serve` subprocesses, real `scontrol` states and reasons, ownership of admin drains,
the storm breaker, and kill -9 of the controller mid-batch (counted in slurmctld's own log)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from e2e_slurm_helpers import drained, node_state, sc, wait_for

from minutiae.testing.serve import ServeProcess

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
TOKEN = "e2e-slurm-token-0123456789abcdef"
NODES = [f"gpu{i:03d}" for i in range(9, 41)]
POLICY = """
dry_run = false
healthy_delay_s = {delay}
stale_after_s = 600
fleet_nodes = "gpu0(09|[1-3][0-9]|40)"
[[rule]]
name = "app-xid-never-drains"
kinds = ["xid"]
codes = [13, 31, 43, 45]
do = "ignore"
examples = [{{kind = "xid", code = 13, action = "restart_app", expect = "ignore"}}]
[[rule]]
name = "gpu-fell-off-bus"
kinds = ["gpu_off_bus", "gpu_missing"]
do = "drain"
step = "reboot"
examples = [{{kind = "gpu_missing", severity = "critical", action = "reboot", expect = "drain"}}]
[[rule]]
name = "needs-remediation"
min_action = "reset_gpu"
do = "drain"
examples = [{{kind = "xid", code = 79, action = "reboot", expect = "drain"}}]
[[ladder]]
step = "reset_gpu"
timeout_s = 900
[[ladder]]
step = "reboot"
timeout_s = 1800
[[ladder]]
step = "inspect"
[lemon]
drains = 100
[budget]
max_unavailable_fraction = {frac}
per_job_max_nodes = 1
[budget.domain_caps]
rack = 16
[budget.rate.drain]
per_minute = 6000
burst = 100
[budget.storm]
fraction = {storm}
window_s = 600
min_nodes = 3
"""
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus",
         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                 "GPU has fallen off the bus."}


@pytest.fixture
def slurm(slurm_conf):
    """Our 32 nodes back to idle before and after each test."""
    def reset():
        for n in NODES:
            st, _ = node_state(slurm_conf, n)
            if "DRAIN" in st or "DOWN" in st:
                sc(slurm_conf, "update", f"NodeName={n}", "State=RESUME")
    reset()
    yield slurm_conf
    reset()


def serve(tmp: Path, conf: str, *, delay=2, frac=0.5, storm=0.9, env=None) -> ServeProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    pol = tmp / "policy.toml"
    pol.write_text(POLICY.format(delay=delay, frac=frac, storm=storm))
    return ServeProcess(tmp / "ctl", TOKEN, "--backend", "slurm", "--slurm-conf", conf,
                        "--policy", str(pol), "--interval", "0.5", env=env)


def post(ctl: ServeProcess, node: str, findings=(), rack: str = "r1") -> None:
    body = {"node": node, "status": "critical" if findings else "ok",
            "checks": [{"check": "gpu", "status": "critical" if findings else "ok",
                        "findings": list(findings)}], "domains": {"rack": rack}}
    r = _HTTP.post(f"{ctl.url}/v1/reports", json=body, headers=ctl.headers)
    assert r.status_code == 202, r.text


_HTTP = httpx.Client(timeout=10)


def run_agent(ctl: ServeProcess, tmp: Path, node: str, xml: Path) -> subprocess.CompletedProcess:
    tok = tmp / "token"
    tok.write_text(TOKEN)
    return subprocess.run(
        [sys.executable, "-m", "minutiae.cli.main", "agent", "--controller", ctl.url,
         "--token-file", str(tok), "--node", node, "--nvidia-smi-xml", str(xml), "--no-nvml",
         "--checks", "gpu", "--state-dir", str(tmp / f"agent-{node}"), "--metrics-listen", "",
         "--domain", "rack=r2", "--cycles", "1"], capture_output=True, text=True, timeout=60)


def test_agent_report_drains_explains_and_resumes(slurm, realdata, tmp_path):
    bad = realdata / "nvidia_smi/telegraf/a100-sxm4-v12.xml"      # 1 of 4 GPUs listed
    good = realdata / "nvidia_smi/telegraf/dual_a5000-v13.xml"
    with serve(tmp_path, slurm) as ctl:
        for n in NODES:
            post(ctl, n)
        r = run_agent(ctl, tmp_path, "gpu012", bad)
        assert r.returncode == 0, r.stderr
        st, reason = wait_for(lambda: drained(slurm, "gpu012"), what="gpu012 drained")
        # the controller's identity (serve's default) is in the reason: only it resumes this
        assert reason == "minutiae[default/controller]: gpu-fell-off-bus gpu_missing step=reboot"
        ex = subprocess.run([sys.executable, "-m", "minutiae.cli.main", "explain", "gpu012",
                             "--controller", ctl.url], capture_output=True, text=True, timeout=30)
        assert ex.returncode == 0, ex.stderr
        assert "gpu012: drained by minutiae: rule gpu-fell-off-bus" in ex.stdout
        assert ("[critical/reboot] gpu_missing node: 1 GPU(s) reported, but the driver says 4 "
                "are attached") in ex.stdout
        assert "budget: allowed (ok):" in ex.stdout
        assert "undo: minutiae resolve gpu012 --now" in ex.stdout
        assert "scheduler undo: scontrol update NodeName=gpu012 State=RESUME" in ex.stdout
        # healthy capture: resumed after the 2 s healthy delay, by the controller
        assert run_agent(ctl, tmp_path, "gpu012", good).returncode == 0
        wait_for(lambda: node_state(slurm, "gpu012")[0] == "IDLE", what="gpu012 resumed")
        audit = httpx.get(f"{ctl.url}/v1/audit", params={"node": "gpu012"}).json()
        assert [(a["action"], a["status"]) for a in audit] == [("resume", "done"),
                                                               ("drain", "done")]


def test_admin_drain_is_left_alone_and_unreachable_scheduler_is_reported(slurm, tmp_path):
    sc(slurm, "update", "NodeName=gpu015", "State=DRAIN", "Reason=PSU swap INC-881")
    with serve(tmp_path, slurm, delay=1) as ctl:
        for n in NODES:
            post(ctl, n, [XID79] if n == "gpu015" else ())
        time.sleep(1.5)
        for n in NODES:
            post(ctl, n)
        time.sleep(2)
        st, reason = node_state(slurm, "gpu015")
        assert "DRAIN" in st and reason == "PSU swap INC-881"
        ex = httpx.get(f"{ctl.url}/v1/nodes/gpu015/explain").json()
        assert ex["why"].startswith("drained by someone else (reason 'PSU swap INC-881')")
    # a controller pointed at a slurm.conf whose slurmctld is not running keeps going
    dead = tmp_path / "dead.conf"
    dead.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=6999", Path(slurm).read_text()))
    ctl = serve(tmp_path / "dead", str(dead)).start()
    try:
        post(ctl, "gpu016", [XID79])
        st = wait_for(lambda: (s := httpx.get(f"{ctl.url}/v1/status").json())["problems"] and s,
                      what="a problem reported")
        assert any(p["what"].startswith("scheduler unreachable, not acting this step: slurm: "
                                        "cannot reach slurmctld") for p in st["problems"])
        assert httpx.get(f"{ctl.url}/healthz").status_code == 200
        post(ctl, "gpu017")                                        # still ingesting
    finally:
        ctl.kill9()  # a graceful stop would wait for scontrol's own 9 s connect timeout
    assert node_state(slurm, "gpu016")[0] == "IDLE"


def test_storm_trips_the_breaker_and_the_budget_is_never_exceeded(slurm, tmp_path):
    """Reports of a storm arrive one by one: the first few may be drained (within the 10 %
    budget = 3 of 32) before the breaker sees > 25 %; then nothing more until a human."""
    with serve(tmp_path, slurm, frac=0.1, storm=0.25) as ctl:
        for n in NODES:
            post(ctl, n, rack=f"r{n}")
        storm = NODES[:10]                                          # 10/32 = 31 %
        for n in storm:
            post(ctl, n, [XID79], rack=f"r{n}")
        st = wait_for(lambda: (s := httpx.get(f"{ctl.url}/v1/status").json())["paused"] and s,
                      what="breaker tripped")
        assert st["paused"]["by"] == "breaker"
        assert re.match(r"storm breaker: (\d+)/32 nodes", st["paused"]["reason"])
        time.sleep(1.5)
        before = [n for n in NODES if drained(slurm, n)]
        assert len(before) <= 3 and set(before) <= set(storm)
        out = subprocess.run([sys.executable, "-m", "minutiae.cli.main", "status", "--controller",
                              ctl.url], capture_output=True, text=True, timeout=30).stdout
        assert "STORM BREAKER TRIPPED" in out
        for n in storm:                                             # the storm keeps reporting
            post(ctl, n, [XID79], rack=f"r{n}")
        time.sleep(1.5)
        assert [n for n in NODES if drained(slurm, n)] == before
        assert httpx.post(f"{ctl.url}/v1/unpause").status_code == 401   # no token: refused
        tok = tmp_path / "token"
        tok.write_text(TOKEN + "\n")
        cli = [sys.executable, "-m", "minutiae.cli.main"]
        bad = subprocess.run([*cli, "unpause", "--controller", ctl.url, "--token-file",
                              str(tmp_path / "absent")], capture_output=True, text=True,
                             timeout=30)
        assert bad.returncode == 3 and "absent: cannot read token" in bad.stderr
        ok = subprocess.run([*cli, "unpause", "--controller", ctl.url, "--token-file", str(tok)],
                            capture_output=True, text=True, timeout=30)
        assert ok.returncode == 0 and ok.stdout.startswith("unpaused"), ok.stderr
        wait_for(lambda: len([n for n in storm if drained(slurm, n)]) == 3,
                 what="3 drained after unpause")
        for n in storm:
            post(ctl, n, [XID79], rack=f"r{n}")
        time.sleep(1.5)
        assert len([n for n in NODES if drained(slurm, n)]) == 3     # 10 % of 32, never more
        table = subprocess.run([*cli, "nodes", "--controller", ctl.url], capture_output=True,
                               text=True, timeout=30).stdout.splitlines()
        ours = [ln.split()[0] for ln in table[1:] if ln.split()[3] == "yes"]
        assert sorted(ours) == sorted(n for n in NODES if drained(slurm, n))
        audit = httpx.get(f"{ctl.url}/v1/audit", params={"limit": 500}).json()
        checks = {a["budget"]["check"] for a in audit if a["action"] == "hold"}
        assert {"storm", "global"} <= checks


def _drains_in_log(log: Path, start: int) -> dict[str, int]:
    text = log.read_bytes()[start:].decode("utf-8", "replace")
    counts: dict[str, int] = {}
    for m in re.finditer(r"update_node: node (gpu\d+) reason set to: minutiae(?:\[[^\]]*\])?:", text):
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def test_kill9_mid_batch_loses_nothing_and_doubles_nothing(slurm, tmp_path):
    # `scontrol update` slowed by a wrapper (the real binary runs after 0.3 s) so that a kill
    # lands mid-batch
    wrap = tmp_path / "bin"
    wrap.mkdir()
    real = subprocess.run(["which", "scontrol"], capture_output=True, text=True).stdout.strip()
    (wrap / "scontrol").write_text(
        f'#!/bin/sh\n[ "$1" = update ] && sleep 0.3\nexec {real} "$@"\n')
    (wrap / "scontrol").chmod(0o755)
    env = {"PATH": f"{wrap}:{os.environ['PATH']}"}
    conf_text = Path(slurm).read_text()
    logfile = Path(re.search(r"SlurmctldLogFile=(\S+)", conf_text).group(1))
    start = logfile.stat().st_size
    victims = NODES[10:22]                                          # 12 nodes at once
    ctl = serve(tmp_path, slurm, frac=0.5, storm=0.9, env=env).start()
    try:
        for n in NODES:
            post(ctl, n, [XID79] if n in victims else (), rack=f"r{n}")

        def mid_batch():
            with sqlite3.connect(ctl.db, timeout=5) as db:
                rows = db.execute("SELECT status FROM audit WHERE action='drain'").fetchall()
            done = sum(1 for (s,) in rows if s == "done")
            return len(rows) == 12 and 1 <= done < 12
        wait_for(mid_batch, timeout=60, what="a batch half done")
        ctl.kill9()
        with sqlite3.connect(ctl.db) as db:
            pending = db.execute("SELECT COUNT(*) FROM audit WHERE status='pending'").fetchone()[0]
        assert pending >= 1
        ctl.start()                                                 # same store
        wait_for(lambda: httpx.get(f"{ctl.url}/v1/status").json()["pending_actions"] == 0,
                 timeout=60, what="pending actions recovered")
        time.sleep(2)
    finally:
        ctl.stop()
    for n in victims:
        st, reason = node_state(slurm, n)
        assert "DRAIN" in st and reason == (
            "minutiae[default/controller]: needs-remediation xid 79 step=reboot"), n
    with sqlite3.connect(ctl.db) as db:
        rows = db.execute("SELECT node, status, detail FROM audit WHERE action='drain'").fetchall()
    assert sorted(n for n, _, _ in rows) == sorted(victims)         # one row per node
    assert {s for _, s, _ in rows} == {"done"}
    assert any((d or "").startswith(("completed on restart", "confirmed on restart"))
               for _, _, d in rows)
    assert _drains_in_log(logfile, start) == {n: 1 for n in victims}  # slurmctld saw each once


def test_silent_nodes_count_against_the_budget(slurm, tmp_path):
    """30 of the 32 fleet nodes report (gpu039, gpu040 never do): with a 10 % budget (3 of
    32) only one of three unhealthy nodes may go; the two silent ones are shown."""
    with serve(tmp_path, slurm, frac=0.1) as ctl:
        bad = ("gpu010", "gpu011", "gpu012")
        for n in NODES[:30]:                    # until they report, all 32 count as silent
            post(ctl, n, rack=f"r{n}")
        for n in bad:
            post(ctl, n, [XID79], rack=f"r{n}")
        wait_for(lambda: any(drained(slurm, n) for n in bad), what="one node drained")
        time.sleep(1.5)
        assert [n for n in bad if drained(slurm, n)] == ["gpu010"]
        st = httpx.get(f"{ctl.url}/v1/status").json()
        assert (st["nodes"], st["silent"], st["never_reported"]) == (32, 2, 2)
        ex = httpx.get(f"{ctl.url}/v1/nodes/gpu011/explain").json()
        assert ex["last_hold"]["budget"]["detail"] == (
            "4/32 nodes unavailable (2 silent) would exceed max_unavailable_fraction 0.1 "
            "(limit 3)")
        out = subprocess.run([sys.executable, "-m", "minutiae.cli.main", "nodes",
                              "--controller", ctl.url], capture_output=True, text=True,
                             timeout=30).stdout
        assert [ln.split()[0] for ln in out.splitlines() if "never!" in ln] == ["gpu039",
                                                                                 "gpu040"]
        assert "gpu041" not in out                                  # outside fleet_nodes


def test_running_job_loses_at_most_what_it_survives(slurm, tmp_path):
    env = {**os.environ, "SLURM_CONF": slurm}
    out = subprocess.run(["sbatch", "--parsable", "-N", "3", "-w", "gpu030,gpu031,gpu032",
                          "-o", "/dev/null", "--wrap", "sleep 300"], capture_output=True,
                         text=True, env=env, timeout=30)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    try:
        def running():
            q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                               text=True, env=env, timeout=30).stdout.strip()
            return q == "RUNNING"
        wait_for(running, what=f"job {job} running")
        with serve(tmp_path, slurm) as ctl:
            for n in NODES:
                post(ctl, n, [XID79] if n in ("gpu030", "gpu031", "gpu032") else (),
                     rack=f"r{n}")
            wait_for(lambda: any(drained(slurm, n) for n in ("gpu030", "gpu031", "gpu032")),
                     what="one node of the job drained")
            time.sleep(1.5)
            taken = [n for n in ("gpu030", "gpu031", "gpu032") if drained(slurm, n)]
            assert taken == ["gpu030"]                  # DRAINING: the job keeps running
            assert "DRAIN" in node_state(slurm, "gpu030")[0]
            ex = httpx.get(f"{ctl.url}/v1/nodes/gpu031/explain").json()
            assert ex["last_hold"]["budget"] == {
                "allowed": False, "check": "job",
                "detail": f"job {job} already lost 1 node(s); it survives 1"}
            # the job's owner says it survives losing two: the API sets it, the budget uses it
            r = _HTTP.put(f"{ctl.url}/v1/jobs/{job}/tolerance", json={"nodes": 2},
                          headers=ctl.headers)
            assert r.status_code == 200, r.text
            wait_for(lambda: drained(slurm, "gpu031"), what="a second node of the job drained")
            time.sleep(1.5)
            assert [n for n in ("gpu030", "gpu031", "gpu032") if drained(slurm, n)] == [
                "gpu030", "gpu031"]
            ex = httpx.get(f"{ctl.url}/v1/nodes/gpu032/explain").json()
            assert ex["last_hold"]["budget"]["detail"] == (f"job {job} already lost 2 node(s); "
                                                           "it survives 2")
    finally:
        subprocess.run(["scancel", job], env=env, timeout=30)


def test_a_jobs_slurm_comment_sets_its_tolerance(slurm, tmp_path):
    from minutiae.schedulers.slurm.backend import parse_job_tolerances

    env = {**os.environ, "SLURM_CONF": slurm}
    out = subprocess.run(["sbatch", "--parsable", "-N", "3", "-w", "gpu034,gpu035,gpu036",
                          "--comment", "minutiae:tolerance=2", "-o", "/dev/null", "--wrap",
                          "sleep 300"], capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    try:
        def listed():
            q = subprocess.run(["squeue", "-h", "-t", "R,CG", "-o", "%i|%k"],
                               capture_output=True, text=True, env=env, timeout=30).stdout
            return parse_job_tolerances(q).get(job) == 2
        wait_for(listed, what=f"job {job} running with its comment")   # the real format
        with serve(tmp_path, slurm) as ctl:
            for n in NODES:
                post(ctl, n, rack=f"r{n}")
            for n in ("gpu034", "gpu035", "gpu036"):
                post(ctl, n, [XID79], rack=f"r{n}")
            wait_for(lambda: sum(bool(drained(slurm, n)) for n in ("gpu034", "gpu035",
                                                                   "gpu036")) == 2,
                     what="two nodes of the job drained")
            time.sleep(1.5)
            assert [n for n in ("gpu034", "gpu035", "gpu036") if drained(slurm, n)] == [
                "gpu034", "gpu035"]
            assert httpx.get(f"{ctl.url}/v1/jobs").json()["from_scheduler"] == {job: 2}
            ex = httpx.get(f"{ctl.url}/v1/nodes/gpu036/explain").json()
            assert ex["last_hold"]["budget"]["detail"] == (f"job {job} already lost 2 node(s); "
                                                           "it survives 2")
    finally:
        subprocess.run(["scancel", job], env=env, timeout=30)

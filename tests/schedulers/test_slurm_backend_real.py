"""``minutiae check --slurm`` and SlurmBackend against the REAL slurmctld started by
``make test`` (scripts/services/slurm-up.sh). Only nodes gpu001–gpu008 are used (conftest)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from minutiae.cli.main import main
from minutiae.errors import BackendError, BackendUnavailable
from minutiae.schedulers.base import NodeSchedState
from minutiae.schedulers.slurm.backend import SlurmBackend, parse_show_node
from minutiae.testing.sysfs import ib_tree, pcie_device

pytestmark = pytest.mark.slurm

IB = ("infiniband", "gpud", "sys-class-infiniband-h100.0")
H100_Q = ("nvidia_smi", "gpud", "nvidia-smi-query.535.161.08.out.0.valid")
XID119 = ("kernel_logs", "gpud", "components_accelerator_nvidia_xid__dmesg-with-xid-119.log")
MINE = [f"gpu00{i}" for i in range(1, 9)]


def _scontrol(conf: str, *args: str) -> str:
    env = dict(os.environ, SLURM_CONF=conf)
    out = subprocess.run(["scontrol", *args], env=env, capture_output=True, text=True, timeout=60, check=False)
    return out.stdout + out.stderr


def _reset(conf: str, node: str) -> None:
    line = _scontrol(conf, "show", "node", "-o", node)
    n = parse_show_node(line)
    if "DRAIN" in n.flags or n.state == "DOWN":
        _scontrol(conf, "update", f"NodeName={node}", "State=RESUME")
    if n.extra:
        _scontrol(conf, "update", f"NodeName={node}", "Extra=")
    if n.comment:
        _scontrol(conf, "update", f"NodeName={node}", "Comment=")


@pytest.fixture()
def conf(slurm_conf: str) -> Iterator[str]:
    for node in MINE:
        _reset(slurm_conf, node)
    yield slurm_conf
    for node in MINE:
        _reset(slurm_conf, node)


@pytest.fixture()
def captures(realdata: Path, tmp_path: Path) -> dict[str, str]:
    root = ib_tree(tmp_path / "sys", realdata.joinpath(*IB))
    for bus in ("19", "3b", "4c", "5d", "9b", "bb", "cb", "db"):
        pcie_device(root, f"0000:{bus}:00.0")
    return {"sysfs": str(root), "smi": str(realdata.joinpath(*H100_Q)), "xid": str(realdata.joinpath(*XID119)),
            "state": str(tmp_path / "state.json")}


def _check(conf: str, c: dict[str, str], node: str, *, faulty: bool, capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    argv = ["check", "--json", "--slurm", "--slurm-conf", conf, "--node", node, "--sysfs-root", c["sysfs"],
            "--nvidia-smi-xml", c["smi"], "--state-file", c["state"]]
    if faulty:
        argv += ["--kmsg", c["xid"]]
    rc = main(argv)
    doc = json.loads(capsys.readouterr().out)
    assert rc == (2 if faulty else 1)
    return doc  # type: ignore[no-any-return]


def test_drain_on_critical_then_resume_when_healthy(conf: str, captures: dict[str, str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    doc = _check(conf, captures, "gpu001", faulty=True, capsys=capsys)
    assert doc["slurm"]["outcome"] == "drained"
    n = parse_show_node(_scontrol(conf, "show", "node", "-o", "gpu001"))
    assert "DRAIN" in n.flags
    assert n.reason == ("minutiae[hcp]: GSP firmware RPC timeout on GPU 0000:9b:00.0 / "
                        "Xid 119 (GSP_RPC_TIMEOUT) on GPU 0000:9b:00.0")
    # the same fault again: nothing changes
    assert _check(conf, captures, "gpu001", faulty=True, capsys=capsys)["slurm"]["outcome"] == "already_drained"
    # healthy (WARNING only) → our drain is resumed
    assert _check(conf, captures, "gpu001", faulty=False, capsys=capsys)["slurm"]["outcome"] == "resumed"
    n = parse_show_node(_scontrol(conf, "show", "node", "-o", "gpu001"))
    assert "DRAIN" not in n.flags and n.reason is None


def test_admin_drain_is_left_alone(conf: str, captures: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    _scontrol(conf, "update", "NodeName=gpu002", "State=DRAIN", "Reason=admin: bad fan, ticket 4711")
    _scontrol(conf, "update", "NodeName=gpu002", "Comment=do not touch")
    for faulty in (True, False):
        doc = _check(conf, captures, "gpu002", faulty=faulty, capsys=capsys)
        assert doc["slurm"]["outcome"] == "left_alone"
    n = parse_show_node(_scontrol(conf, "show", "node", "-o", "gpu002"))
    assert "DRAIN" in n.flags
    assert n.reason == "admin: bad fan, ticket 4711"
    assert n.comment == "do not touch"


def test_backend_contract_on_real_slurm(conf: str) -> None:
    b = SlurmBackend(conf)
    assert b.state("gpu003").state is NodeSchedState.AVAILABLE
    b.drain("gpu003", "xid 79 gpu 0000:44:00 fell off bus")
    st = b.state("gpu003")
    assert (st.state, st.reason, st.ours) == (
        NodeSchedState.DRAINED, "minutiae[default/controller]: xid 79 gpu 0000:44:00 fell off bus", True)
    b.annotate("gpu003", "since", "2026-11-30T09:00:00")
    assert "minutiae.since=2026-11-30T09:00:00" in _scontrol(conf, "show", "node", "-o", "gpu003")
    b.resume("gpu003")
    b.resume("gpu003")  # idempotent
    assert b.state("gpu003").state is NodeSchedState.AVAILABLE
    _scontrol(conf, "update", "NodeName=gpu004", "State=DRAIN", "Reason=other-tool: maintenance")
    with pytest.raises(BackendError, match="refusing to resume gpu004"):
        b.resume("gpu004")
    b.drain("gpu004", "x")
    assert b.state("gpu004").reason == "other-tool: maintenance"
    with pytest.raises(BackendError, match="not found"):
        b.state("gpu999")


def test_unreachable_slurmctld(tmp_path: Path, slurm_conf: str) -> None:
    bad = tmp_path / "slurm.conf"
    bad.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=6999", Path(slurm_conf).read_text()))
    with pytest.raises(BackendUnavailable, match="slurm"):
        SlurmBackend(str(bad), timeout_s=4).state("gpu005")


def test_unreachable_from_the_cli_is_a_clear_error(tmp_path: Path, slurm_conf: str, captures: dict[str, str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "slurm.conf"
    bad.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=6999", Path(slurm_conf).read_text()))
    rc = main(["check", "--slurm", "--slurm-conf", str(bad), "--slurm-timeout", "3", "--node", "gpu005",
               "--sysfs-root", captures["sysfs"],
               "--nvidia-smi-xml", captures["smi"]])
    err = capsys.readouterr().err
    assert rc == 3 and "minutiae: error: slurm:" in err and "Traceback" not in err


def test_admin_resume_acknowledges_the_kernel_log_fault(conf: str, captures: dict[str, str], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(Path(captures["xid"]).read_bytes())
    argv = ["check", "--json", "--slurm", "--slurm-conf", conf, "--node", "gpu006", "--sysfs-root",
            captures["sysfs"], "--nvidia-smi-xml", captures["smi"], "--state-file", captures["state"],
            "--kmsg", str(log)]
    main(argv)
    assert json.loads(capsys.readouterr().out)["slurm"]["outcome"] == "drained"
    _scontrol(conf, "update", "NodeName=gpu006", "State=RESUME")  # the admin, after a GPU reset
    main(argv)
    doc = json.loads(capsys.readouterr().out)
    assert doc["slurm"]["outcome"] == "nothing" and len(doc["slurm"]["acknowledged"]) == 2
    n = parse_show_node(_scontrol(conf, "show", "node", "-o", "gpu006"))
    assert "DRAIN" not in n.flags


# -- ownership: the HealthCheckProgram and a controller on the same real slurmctld --------------

CTL = "e2e/ctl-a"
XID79_LINE = ("[{t:.6f}] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has "
              "fallen off the bus.")  # the driver's line as in gpud's Xid 79 fixtures


def _xid79(t: float) -> dict[str, object]:
    return {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
            "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus",
            "line": XID79_LINE.format(t=t)}


def _rep(node: str, *findings: dict[str, object]) -> dict[str, object]:
    status = "critical" if findings else "ok"
    return {"node": node, "status": status, "domains": {"rack": "r-own"},
            "checks": [{"check": "gpu", "status": status, "findings": list(findings)}]}


def _controller(conf: str, tmp_path: Path, fleet: str):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from minutiae.controller.policy import load_policy
    from minutiae.controller.service import Controller
    from minutiae.controller.store import Store
    from minutiae.testing import FakeClock

    p = load_policy()
    budget = replace(p.budget, max_unavailable_fraction=1.0,
                     storm=replace(p.budget.storm, fraction=1.0))
    policy = replace(p, dry_run=False, healthy_delay_s=60.0, budget=budget, fleet_nodes=fleet)
    clock = FakeClock()
    ctl = Controller(Store(tmp_path / "c.db"), SlurmBackend(conf, owner=CTL), policy, clock)
    return ctl, clock


def _reason(conf: str, node: str) -> str | None:
    n = parse_show_node(_scontrol(conf, "show", "node", "-o", node))
    return n.reason if "DRAIN" in n.flags else None


def test_hcp_and_controller_never_resume_each_others_drains(
        conf: str, captures: dict[str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    ctl, clock = _controller(conf, tmp_path, "gpu00[45]")
    # the HCP (real `minutiae check --slurm`) drains gpu004; the controller drains gpu005
    assert _check(conf, captures, "gpu004", faulty=True, capsys=capsys)["slurm"]["outcome"] == "drained"
    ctl.ingest(_rep("gpu005", _xid79(1234.5)))
    ctl.ingest(_rep("gpu004"))  # the controller hears gpu004 is healthy: not its drain
    ctl.step()
    assert (_reason(conf, "gpu004") or "").startswith("minutiae[hcp]: ")
    assert (_reason(conf, "gpu005") or "").startswith(f"minutiae[{CTL}]: ")
    wrong = 0
    for _ in range(4):  # both sides see the other's node healthy, well past the healthy delay
        clock.advance(61)
        ctl.ingest(_rep("gpu004"))
        ctl.step()
        out = _check(conf, captures, "gpu005", faulty=False, capsys=capsys)["slurm"]
        assert out["outcome"] == "left_alone", out
        wrong += (_reason(conf, "gpu004") is None) + (_reason(conf, "gpu005") is None)
    assert wrong == 0  # 0 drains resumed by the wrong owner
    rows = {r["node"]: r for r in ctl.node_rows()}
    assert rows["gpu004"]["owner"] == "hcp" and not rows["gpu004"]["ours"]
    assert rows["gpu005"]["owner"] == CTL and rows["gpu005"]["ours"]
    assert "HealthCheckProgram" in ctl.explain("gpu004")["why"]
    assert ctl.status()["unavailable"] >= 2  # the HCP's drain counts in the budget too
    # each owner resumes its own
    assert _check(conf, captures, "gpu004", faulty=False, capsys=capsys)["slurm"]["outcome"] == "resumed"
    ctl.ingest(_rep("gpu005"))
    ctl.step()
    clock.advance(61)
    ctl.ingest(_rep("gpu005"))
    ctl.step()
    assert _reason(conf, "gpu004") is None and _reason(conf, "gpu005") is None


def test_resolved_node_stays_in_service_until_new_evidence(conf: str, tmp_path: Path) -> None:
    ctl, clock = _controller(conf, tmp_path, "gpu007")
    fault = _xid79(1234.5)
    ctl.ingest(_rep("gpu007", fault))
    ctl.step()
    assert (_reason(conf, "gpu007") or "").startswith(f"minutiae[{CTL}]: ")
    out = ctl.resolve("gpu007", "GPU reseated, dcgmi diag -r 3 passed", now=True, by="alice")
    assert out["resumed"] == "now" and len(out["acknowledged"]) == 1
    assert _reason(conf, "gpu007") is None
    for _ in range(5):  # the kernel log still holds the old line (faults count since boot)
        clock.advance(61)
        ctl.ingest(_rep("gpu007", fault))
        ctl.step()
        assert _reason(conf, "gpu007") is None, "a resolved node was drained on old evidence"
    # a new fault (a new kernel-log line) drains it again
    ctl.ingest(_rep("gpu007", fault, _xid79(9876.5)))
    ctl.step()
    assert (_reason(conf, "gpu007") or "").startswith(f"minutiae[{CTL}]: ")
    acts = [(a.action, a.rule, a.status) for a in reversed(ctl.store.audit(node="gpu007"))]
    assert acts == [("drain", "needs-remediation", "done"), ("resolve", "resolve", "done"),
                    ("resume", "resolve", "done"), ("drain", "needs-remediation", "done")]


def test_an_admins_scontrol_resume_is_honoured_as_a_resolve(conf: str, tmp_path: Path) -> None:
    ctl, clock = _controller(conf, tmp_path, "gpu008")
    fault = _xid79(55.25)
    ctl.ingest(_rep("gpu008", fault))
    ctl.step()
    clock.advance(5)
    ctl.step()  # sees its drain in Slurm
    _scontrol(conf, "update", "NodeName=gpu008", "State=RESUME")  # the admin fixed it
    for _ in range(3):
        clock.advance(61)
        ctl.ingest(_rep("gpu008", fault))
        ctl.step()
        assert _reason(conf, "gpu008") is None, "the controller fought the admin's resume"
    [row] = [a for a in ctl.store.audit(node="gpu008") if a.action == "resolve"]
    assert row.rule == "admin-resume" and row.status == "done"
    ctl.ingest(_rep("gpu008", fault, _xid79(77.5)))
    ctl.step()
    assert _reason(conf, "gpu008") is not None

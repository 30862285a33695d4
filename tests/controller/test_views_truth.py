"""Views tell the truth: in dry-run the scheduler's state stays the scheduler's (idle) and what
minutiae would have done is beside it; explain on an UNKNOWN node says which source could not
be read; the nodes table shows who drained a node."""

from __future__ import annotations

from pathlib import Path

from minutiae.controller.http.client import format_explain, format_nodes
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.schedulers.base import NodeSchedState
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus",
         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                 "GPU has fallen off the bus."}


def _world(tmp_path: Path) -> tuple[Controller, RecordingBackend]:
    be = RecordingBackend(name="slurm")
    for i in range(1, 21):
        be.add_node(f"gpu{i:03d}")
    return Controller(Store(tmp_path / "c.db"), be, load_policy(), FakeClock()), be


def _rep(node: str, checks: list[dict[str, object]]) -> dict[str, object]:
    worst = "critical" if any(c["status"] == "critical" for c in checks) else (
        "unknown" if any(c["status"] == "unknown" for c in checks) else "ok")
    return {"node": node, "status": worst, "domains": {"rack": f"r-{node}"}, "checks": checks}


def test_dry_run_would_drain_is_shown_beside_the_schedulers_state(tmp_path: Path) -> None:
    ctl, be = _world(tmp_path)
    assert ctl.dry_run
    for i in range(2, 21):
        ctl.ingest(_rep(f"gpu{i:03d}", [{"check": "gpu", "status": "ok", "findings": []}]))
    ctl.ingest(_rep("gpu001", [{"check": "gpu", "status": "critical", "findings": [XID79]}]))
    ctl.step()
    ctl.step()
    assert be.nodes["gpu001"].state is NodeSchedState.AVAILABLE and be.calls == []
    row = {r["node"]: r for r in ctl.node_rows()}["gpu001"]
    assert row["sched"] == "available" and row["would"].startswith("drained: minutiae[")
    st = ctl.status()
    assert st["unavailable"] == 0 and st["would_be_drained"] == 1
    ex = ctl.explain("gpu001")
    assert ex["why"].startswith("dry-run: would be drained") and "scheduler says available" \
        in ex["why"]
    assert "[dry-run: would be drained" in format_nodes(ctl.node_rows())


def test_explain_on_an_unknown_node_names_the_source_that_could_not_be_read(
        tmp_path: Path) -> None:
    ctl, _ = _world(tmp_path)
    ctl.ingest(_rep("gpu002", [
        {"check": "gpu", "status": "ok", "findings": []},
        {"check": "kernel_log", "status": "unknown",
         "reason": "/dev/kmsg: Permission denied (run as root or grant CAP_SYSLOG)"}]))
    ctl.step()
    ex = ctl.explain("gpu002")
    assert ex["health"] == "unknown"
    assert "kernel_log: /dev/kmsg: Permission denied" in ex["why"]
    assert "kernel_log" in format_explain(ex)

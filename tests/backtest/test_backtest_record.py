"""Record → backtest: the controller's ReportRecorder writes what ``minutiae backtest`` replays."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from minutiae.backtest.history import load_history
from minutiae.backtest.replay import replay
from minutiae.controller.policy import load_policy
from minutiae.controller.record import ReportRecorder
from minutiae.controller.service import Controller
from minutiae.controller.state import Verb
from minutiae.controller.store import Store
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

T0 = 1_780_000_000.0
XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "message": "GPU has fallen off the bus",
         "line": "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."}


def body(node: str, bad: bool, age: float = 0.0) -> dict[str, Any]:
    return {"node": node, "status": "critical" if bad else "ok",
            "checks": [{"check": "gpu", "status": "critical" if bad else "ok",
                        "findings": [XID79] if bad else []}],
            "domains": {"rack": f"r{node[-1]}"}, "agent": {"version": "t", "age_s": age}}


def test_recorded_reports_replay_to_the_same_decision(tmp_path: Path) -> None:
    clock = FakeClock(start=T0)
    rec = ReportRecorder(tmp_path / "rec", heartbeat_s=60)
    ctl = Controller(Store(tmp_path / "c.db"), RecordingBackend(), load_policy(), clock,
                     recorder=rec)
    nodes = [f"gpu{i:03d}" for i in range(1, 21)]
    for k in range(40):  # 40 reports per node, every 10 s; gpu007 goes bad at +200 s
        for n in nodes:
            ctl.ingest(body(n, n == "gpu007" and k >= 20, age=2.0 if k == 5 else 0.0))
        clock.advance(10)
    rec.close()
    lines = [json.loads(x) for x in (tmp_path / "rec" / "reports.jsonl").read_text().splitlines()]
    # 20 nodes x 400 s: first report, then a heartbeat every 60 s (7 per node), plus the change
    assert len(lines) == 20 * 7 + 1 == rec.written
    assert all("agent" not in x for x in lines)  # its age is already taken off "time"
    first_bad = next(x for x in lines if x["status"] == "critical")
    assert (first_bad["node"], first_bad["time"]) == ("gpu007", T0 + 200)
    h = load_history(tmp_path / "rec")
    assert h.layout == "recorded" and len(h.nodes) == 20 and h.domains["gpu007"] == {"rack": "r7"}
    r = replay(h, load_policy(), step_s=10)
    assert [(d.node, d.action, d.time - T0) for d in r.decisions] == [("gpu007", Verb.DRAIN, 200.0)]


def test_recording_failure_never_breaks_ingest(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    rec = ReportRecorder(blocker / "sub")
    clock = FakeClock(start=T0)
    ctl = Controller(Store(tmp_path / "c.db"), RecordingBackend(), load_policy(), clock, recorder=rec)
    rep = ctl.ingest(body("gpu001", True))
    assert rep.node == "gpu001" and rec.written == 0
    clock.advance(120)
    ctl.ingest(body("gpu001", True))  # recording stopped quietly; ingest still works
    assert rec.written == 0

"""nvidia-peermem "ERROR detected invalid context": a job-teardown line (info), and its burst
count rule (log_counts.toml peermem-invalid-context-repeats), on the real GPUd captures."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from minutiae.model import Action, Finding, Severity
from minutiae.node.sources.kernel_log.parse import parse_text
from minutiae.rules.engine.engine import Engine
from minutiae.rules.engine.rules import shipped_engine_rules
from minutiae.rules.log_findings import findings_from_events
from minutiae.testing import FakeClock

GPUD = "kernel_logs/gpud"
CAPTURE = f"{GPUD}/pkg_dmesg__dmesg.peermem.log.0"


def _findings(realdata: Path, name: str = CAPTURE) -> list[Finding]:
    text = (realdata / name).read_text(encoding="utf-8", errors="replace")
    return list(findings_from_events(parse_text(text, year=2025)))


def _alarms(findings: list[Finding], now: float) -> list[Finding]:
    rules = [r for r in shipped_engine_rules() if r.id == "peermem-invalid-context-repeats"]
    assert len(rules) == 1
    eng = Engine(rules, clock=FakeClock(now), node="gpu001")
    eng.record(findings)
    return list(eng.evaluate().findings)


def test_a_teardown_burst_is_information_not_a_warning(realdata: Path) -> None:
    for name in (CAPTURE, f"{GPUD}/pkg_kmsg__kmsg.2.peermem.log"):
        found = _findings(realdata, name)
        assert len(found) == 7, name
        # info: `minutiae check`'s kernel-log group stays OK and the policy neither notifies
        # nor drains on a job's ordinary GPUDirect RDMA teardown
        assert {(f.rule, f.severity, f.action) for f in found} == {
            ("peermem-invalid-context", Severity.INFO, Action.NONE)}


def test_one_burst_does_not_alarm_but_thirty_bursts_within_an_hour_do(realdata: Path) -> None:
    burst = [f for f in _findings(realdata) if f.time is not None]
    assert len(burst) == 7
    last = max(f.time for f in burst if f.time is not None)
    assert _alarms(burst, last.timestamp() + 1) == []
    # the same 7 lines again every 2 minutes: 30 teardowns, 210 lines within 58 minutes
    shifted = [replace(f, time=f.time + timedelta(minutes=2 * k)) for k in range(30)
               for f in burst if f.time is not None]
    (alarm,) = _alarms(shifted, last.timestamp() + 58 * 60 + 1)
    assert (alarm.kind, alarm.severity, alarm.action) == ("peermem_error", Severity.WARNING, Action.NONE)
    assert alarm.attrs["value"] == 210
    # 28 bursts (196 lines) stay below the threshold of 200
    assert _alarms(shifted[:196], last.timestamp() + 58 * 60 + 1) == []

"""Failed actions are retried with backoff and reported until they land or are given up: resumes
that came due while the scheduler was unreachable (a backend that fails, then works)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.errors import BackendUnavailable
from minutiae.schedulers.base import NodeSchedState
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

XID79 = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
         "pci": "0000:3b:00.0", "message": "GPU has fallen off the bus",
         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                 "GPU has fallen off the bus."}
NODES = [f"gpu{i:03d}" for i in range(1, 21)]


@dataclass
class Flaky(RecordingBackend):
    """Resumes fail (slurmctld restarting) while ``down`` is set; state reads still work."""

    down: bool = False

    def resume(self, node: str) -> None:
        if self.down:
            raise BackendUnavailable("slurm: cannot reach slurmctld: Connection refused")
        super().resume(node)


def _rep(node: str, bad: bool = False) -> dict[str, object]:
    status = "critical" if bad else "ok"
    return {"node": node, "status": status, "domains": {"rack": f"r{node[-1]}"},
            "checks": [{"check": "gpu", "status": status, "findings": [XID79] if bad else []}]}


def _world(tmp_path: Path) -> tuple[Controller, Flaky, FakeClock]:
    be = Flaky(name="slurm")
    for n in NODES:
        be.add_node(n)
    clock = FakeClock()
    policy = replace(load_policy(), dry_run=False, healthy_delay_s=60.0)
    ctl = Controller(Store(tmp_path / "c.db"), be, policy, clock)
    return ctl, be, clock


def _feed(ctl: Controller, bad: set[str]) -> None:
    for n in NODES:
        ctl.ingest(_rep(n, n in bad))


def test_resumes_due_while_the_scheduler_is_down_are_retried_and_land(tmp_path: Path) -> None:
    ctl, be, clock = _world(tmp_path)
    sick = {"gpu001", "gpu002"}
    _feed(ctl, sick)
    ctl.step()
    assert {n for n, s in be.nodes.items() if s.state is NodeSchedState.DRAINED} == sick
    _feed(ctl, set())
    ctl.step()
    clock.advance(61)
    be.down = True  # slurmctld restarts just as the resumes come due
    _feed(ctl, set())
    ctl.step()
    st = ctl.status()
    assert {r["node"] for r in st["retrying"]} == sick
    assert all(r["attempts"] == 1 and "Connection refused" in r["last_error"]
               for r in st["retrying"])
    clock.advance(5)
    ctl.step()  # still down: attempt 2 fails, the next waits 10 s
    assert {r["attempts"] for r in ctl.status()["retrying"]} == {2}
    be.down = False
    clock.advance(4)
    ctl.step()  # not due yet (backoff): nothing tried
    assert all(s.state is NodeSchedState.DRAINED for n, s in be.nodes.items() if n in sick)
    clock.advance(6)
    ctl.step()
    assert all(be.nodes[n].state is NodeSchedState.AVAILABLE for n in sick)
    assert ctl.status()["retrying"] == []
    rows = [a for a in ctl.store.audit(limit=50) if a.action == "resume"]
    assert sorted((a.node, a.status) for a in rows) == [("gpu001", "done"), ("gpu002", "done")]
    assert all(a.detail == "done on attempt 3" for a in rows)


def test_a_retry_that_never_lands_is_given_up_and_said(tmp_path: Path) -> None:
    ctl, be, clock = _world(tmp_path)
    ctl.retries.max_attempts = 3
    _feed(ctl, {"gpu003"})
    ctl.step()
    _feed(ctl, set())
    ctl.step()
    clock.advance(61)
    be.down = True
    _feed(ctl, set())
    ctl.step()
    for _ in range(6):
        clock.advance(300)
        ctl.step()
    assert ctl.status()["retrying"] == []
    [row] = [a for a in ctl.store.audit(node="gpu003") if a.action == "resume"]
    assert row.status == "failed" and row.detail is not None and "gave up after 3" in row.detail
    assert any("gave up resume gpu003" in p["what"] for p in ctl.status()["problems"])

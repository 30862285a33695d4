"""The controller's SQLite store: memory and pause round-trip, audit rows, and a clear error
naming the path for a file that is not a database."""

from __future__ import annotations

import pytest

from minutiae.controller.budget import Bucket, BudgetVerdict
from minutiae.controller.state import ControllerMemory, Decision, NodeMemory, Pause, Verb
from minutiae.controller.store import DONE, HELD, PENDING, Store
from minutiae.errors import StoreError
from minutiae.model import Action


def decision(node: str, verb: Verb, new: bool = True) -> Decision:
    return Decision(node, verb, "needs-remediation", ("[critical/reboot] xid 79: line",),
                    BudgetVerdict(verb is not Verb.HOLD, "ok" if verb is not Verb.HOLD else
                                  "global", "1/32"), "scontrol update NodeName=x State=RESUME",
                    100.0, step=Action.REBOOT, reason="minutiae: x",
                    wanted=Verb.DRAIN if verb is Verb.HOLD else None, new=new)


def test_batch_memory_and_audit_round_trip(tmp_path):
    s = Store(tmp_path / "s.db")
    before = ControllerMemory()
    mem = ControllerMemory(
        nodes={"gpu001": NodeMemory(unhealthy_since=1.0, drained_at=2.0, step=Action.REBOOT,
                                    step_since=2.0, drains=(2.0,), lemon=True)},
        buckets={"drain": Bucket(3.5, 2.0)}, pause=Pause("breaker says", 2.0, "breaker"),
        breaker_since=None)
    ids = s.begin_batch(mem, before, [decision("gpu001", Verb.DRAIN),
                                      decision("gpu002", Verb.HOLD),
                                      decision("gpu003", Verb.HOLD, new=False)], dry_run=False)
    assert len(ids) == 1
    assert [(r.node, r.status) for r in s.pending()] == [("gpu001", PENDING)]
    s.finish(ids[0], DONE, None, 101.0)
    rows = s.audit()
    assert [(r.node, r.action, r.status) for r in rows] == [("gpu002", "hold", HELD),
                                                            ("gpu001", "drain", DONE)]
    assert rows[1].evidence == ("[critical/reboot] xid 79: line",) and rows[1].step == "reboot"
    assert rows[0].budget == {"allowed": False, "check": "global", "detail": "1/32"}
    s.close()
    again = Store(tmp_path / "s.db").load_memory()
    assert again == mem
    # a later batch that forgets a node deletes its memory
    Store(tmp_path / "s.db").begin_batch(ControllerMemory(), mem, [], dry_run=False)
    assert Store(tmp_path / "s.db").load_memory().nodes == {}


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path):
    p = tmp_path / "garbage.db"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=str(p)):
        Store(p)
    with pytest.raises(StoreError, match="cannot open store"):
        Store(tmp_path / "no" / "such" / "dir" / "x.db")

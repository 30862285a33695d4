"""The controller's store contract, run on both engines (SQLite file and the real PostgreSQL of
scripts/services/postgres-up.sh): memory and pause round-trip, audit rows, a clear error naming
the path for a file that is not a database; on PostgreSQL the fencing epoch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from ha_support import fresh_schema_dsn

from minutiae.controller.budget import Bucket, BudgetVerdict
from minutiae.controller.state import ControllerMemory, Decision, NodeMemory, Pause, Verb
from minutiae.controller.store import DONE, HELD, PENDING, ControllerStore, Store, open_store
from minutiae.errors import StoreError
from minutiae.model import Action


def decision(node: str, verb: Verb, new: bool = True) -> Decision:
    return Decision(node, verb, "needs-remediation", ("[critical/reboot] xid 79: line",),
                    BudgetVerdict(verb is not Verb.HOLD, "ok" if verb is not Verb.HOLD else
                                  "global", "1/32"), "scontrol update NodeName=x State=RESUME",
                    100.0, step=Action.REBOOT, reason="minutiae: x",
                    wanted=Verb.DRAIN if verb is Verb.HOLD else None, new=new)


Opener = Callable[[], ControllerStore]


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """A function that opens the same store again (a restart) on either engine."""
    where = str(tmp_path / "s.db") if request.param == "sqlite" else fresh_schema_dsn()
    return lambda: open_store(where, identity="test/ctl-a")


def test_batch_memory_and_audit_round_trip(opener: Opener) -> None:
    s = opener()
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
    again = opener().load_memory()
    assert again == mem
    # a later batch that forgets a node deletes its memory
    opener().begin_batch(ControllerMemory(), mem, [], dry_run=False)
    assert opener().load_memory().nodes == {}


def test_pause_kv_tolerance_and_timings_survive_a_reopen(opener: Opener) -> None:
    s = opener()
    s.save_pause(Pause("storm: 9 nodes in 60 s", 50.0, "breaker"), 50.0)
    s.set_kv("dry_overlay", {"gpu001": "minutiae: x"})
    s.set_tolerance("4242", 2, 10.0)
    s.set_tolerance("4243", 1, 10.0)
    s.set_tolerance("4243", None, 11.0)
    s.save_timings([("4242", 1, 0, "gpu001", 1.5, 10.0), ("4242", 2, 0, "gpu001", 1.6, 11.0)])
    s.close()
    t = opener()
    m = t.load_memory()
    assert m.pause == Pause("storm: 9 nodes in 60 s", 50.0, "breaker") and m.breaker_since == 50.0
    assert t.get_kv("dry_overlay") == {"gpu001": "minutiae: x"} and t.get_kv("nope") is None
    assert t.tolerances() == {"4242": 2}
    assert t.count_timings("4242") == 2
    assert sorted(t.job_timings("4242")) == [(1, 0, "gpu001", 1.5, 10.0), (2, 0, "gpu001", 1.6, 11.0)]


def test_reports_upsert_keeps_the_newest(opener: Opener) -> None:
    s = opener()
    s.save_reports([("gpu001", 10.0, '{"a": 1}', "{}", "d1"),
                    ("gpu002", 10.0, '{"b": 1}', "{}", "d2")])
    s.save_reports([("gpu001", 12.0, '{"a": 2}', "{}", "d3")], beats=[(13.0, "gpu002")])
    s.save_reports([("gpu001", 11.0, '{"a": 0}', "{}", "d0")], beats=[(12.5, "gpu002")])
    got = {n: (t, r) for n, t, r, _d in opener().load_reports()}
    assert got == {"gpu001": (12.0, '{"a": 2}'), "gpu002": (13.0, '{"b": 1}')}
    assert sorted(s.report_bodies(["gpu002", "gpu404"])) == [("gpu002", 13.0, '{"b": 1}', "{}")]


def test_other_replicas_reports_come_as_digests_then_bodies() -> None:
    """PostgreSQL: a replica reads (node, time, digest) of what the others stored, never its
    own rows; a heartbeat keeps the digest of the report it re-dates."""
    from ha_support import fresh_schema_dsn

    from minutiae.controller.store.postgres import PgStore

    dsn = fresh_schema_dsn()
    a, b = PgStore(dsn, identity="a", size=1), PgStore(dsn, identity="b", size=1)
    a.save_reports([("gpu001", 10.0, '{"a": 1}', "{}", "d1"),
                    ("gpu002", 10.0, '{"b": 1}', "{}", "d2")])
    got, cur = b.reports_since(0)
    assert sorted(got) == [("gpu001", 10.0, "d1"), ("gpu002", 10.0, "d2")] and cur > 0
    assert a.reports_since(0)[0] == []               # its own rows are not read back
    a.save_reports([], beats=[(14.0, "gpu002")])
    again, cur2 = b.reports_since(cur)
    assert ("gpu002", 14.0, "d2") in again and cur2 > cur
    b.save_reports([("gpu002", 15.0, '{"b": 2}', "{}", "d9")])
    assert ("gpu002", 15.0, "d9") in a.reports_since(0)[0]


def test_claim_takes_a_pending_row_once(opener: Opener) -> None:
    s = opener()
    (rid,) = s.begin_batch(ControllerMemory(), ControllerMemory(),
                           [decision("gpu001", Verb.DRAIN)], dry_run=False, epoch=None)
    if isinstance(s, Store):
        assert s.claim(rid, 1)
    else:  # PostgreSQL fences: no leader row yet means no epoch is current
        with pytest.raises(StoreError, match="fenced"):
            s.claim(rid, 1)


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path):
    p = tmp_path / "garbage.db"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=str(p)):
        Store(p)
    with pytest.raises(StoreError, match="cannot open store"):
        Store(tmp_path / "no" / "such" / "dir" / "x.db")


def test_a_replica_is_woken_by_the_others_reports_that_change_a_node() -> None:
    """PostgreSQL NOTIFY: a take with ``wake`` stored by another replica wakes a listener;
    its own takes and takes without ``wake`` do not."""
    import threading
    import time

    from ha_support import fresh_schema_dsn

    from minutiae.controller.store.postgres import PgStore

    dsn = fresh_schema_dsn()
    a, b = PgStore(dsn, identity="a", size=1), PgStore(dsn, identity="b", size=1)
    woken = threading.Event()
    stop = threading.Event()
    a.listen(woken.set, stop)
    time.sleep(1.0)                                    # LISTEN is in place
    try:
        a.save_reports([("gpu001", 1.0, "{}", "{}", "d1")], wake=True)   # its own
        b.save_reports([("gpu002", 1.0, "{}", "{}", "d2")])              # nothing changed
        assert not woken.wait(1.5)
        b.save_reports([("gpu003", 1.0, "{}", "{}", "d3")], wake=True)
        assert woken.wait(5.0)
    finally:
        stop.set()

"""SQLite single actor: the second controller on the same database file does not act."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from minutiae.clock import ManualClock
from minutiae.controller.leadership import Role, SoleActor, SqliteFileLock, lock_path


def test_second_holder_is_standby_and_names_the_leader(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    clock = ManualClock(1000.0)
    a = SqliteFileLock(db, "prod/ctl-a", clock)
    b = SqliteFileLock(db, "prod/ctl-b", clock)
    assert a.acquire() and a.fence() == 1
    assert not b.acquire()
    assert b.fence() is None
    st = b.status()
    assert st.role is Role.STANDBY and st.leader == "prod/ctl-a" and st.epoch == 1
    assert st.detail and "ctl-a" in st.detail
    assert a.status().to_json()["role"] == "leader"
    a.release()
    assert b.acquire() and b.fence() == 2  # a new holder: the epoch goes up
    assert a.fence() is None and not a.acquire()


def test_holder_killed_lock_is_taken_over(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    code = ("import sys,time\nfrom minutiae.clock import SystemClock\n"
            "from minutiae.controller.leadership import SqliteFileLock\n"
            f"l = SqliteFileLock({str(db)!r}, 'x/other', SystemClock())\n"
            "assert l.acquire(); print('held', flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        me = SqliteFileLock(db, "x/me", ManualClock(5.0))
        assert not me.acquire()
        assert me.status().leader == "x/other"
        p.kill()
        p.wait(10)
        assert me.acquire() and me.fence() == 2
        assert json.loads(lock_path(db).read_text())["pid"] == os.getpid()
    finally:
        p.kill()
        p.wait(10)


def test_lock_file_replaced_means_not_leader(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    a = SqliteFileLock(db, "c/a", ManualClock(0.0))
    assert a.acquire()
    lock_path(db).unlink()
    assert a.fence() is None  # someone removed the file: another process may lock a new one
    assert a.acquire() and a.fence() == 1


def test_sole_actor_always_leads() -> None:
    s = SoleActor("c/x", ManualClock(0.0))
    assert s.acquire() and s.fence() == 1 and s.status().role is Role.LEADER

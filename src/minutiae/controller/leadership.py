"""Who may act: the controller asks a :class:`Leadership` before every batch of actions.

One controller acts on a cluster at a time. ``acquire()`` tries to become (or stay) the
leader and is called once per step; ``fence()`` gives the epoch to write with each
audit-before-act insert, or None when this controller is not the leader (then it must not
act: it may still ingest reports and serve reads). ``status()`` is what ``GET /v1/status``
shows as ``role`` / ``epoch`` / ``leader``.

Implementations:

- :class:`SqliteFileLock` (here): one database file, one actor. ``fcntl.flock`` on
  ``<db>.lock``; the holder writes its identity and epoch into the file so a standby can say
  who leads. The epoch goes up by one each time a new holder takes the lock.
- PostgreSQL advisory lock / Kubernetes Lease: ``minutiae.controller.ha`` (same protocol).
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from minutiae.clock import Clock
from minutiae.errors import StoreError

__all__ = ["Leadership", "LeaderStatus", "Role", "SoleActor", "SqliteFileLock", "lock_path"]


class Role(Enum):
    LEADER = "leader"
    STANDBY = "standby"


@dataclass(frozen=True, slots=True)
class LeaderStatus:
    role: Role
    #: the current leader's epoch (ours when leader; the holder's when known, else None)
    epoch: int | None
    #: the leading controller's identity (``cluster/controller``), None when unknown
    leader: str | None
    #: which mechanism decides (``sqlite-lock``, ``none``, ``postgres``, ``lease``)
    mechanism: str
    #: for a standby: why it does not act (one line)
    detail: str | None = None
    #: since when (clock time) the leader holds it, when known
    since: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role.value, "epoch": self.epoch, "leader": self.leader,
                "leadership": self.mechanism, "leadership_detail": self.detail,
                "leader_since": self.since}


class Leadership(Protocol):
    def acquire(self) -> bool:
        """Become or stay the leader if possible; True when this controller now leads."""
        ...

    def status(self) -> LeaderStatus: ...

    def fence(self) -> int | None:
        """The epoch to write with each audit-before-act insert; None: not leader, don't act."""
        ...


def lock_path(db: str | Path) -> Path:
    return Path(f"{db}.lock")


class SoleActor:
    """No election (an in-memory store, tests): always the leader, epoch 1."""

    def __init__(self, identity: str, clock: Clock) -> None:
        self.identity = identity
        self._since = clock.now()

    def acquire(self) -> bool:
        return True

    def status(self) -> LeaderStatus:
        return LeaderStatus(Role.LEADER, 1, self.identity, "none", None, self._since)

    def fence(self) -> int | None:
        return 1


class SqliteFileLock:
    """One actor per SQLite database: an exclusive ``flock`` on ``<db>.lock``.

    The kernel drops the lock when the holder's process dies (kill -9 included), so a standby's
    next ``acquire()`` takes over without a timeout. The file holds
    ``{"leader": identity, "epoch": n, "since": t, "pid": p}`` of the current holder."""

    mechanism = "sqlite-lock"

    def __init__(self, db: str | Path, identity: str, clock: Clock) -> None:
        self.path = lock_path(db)
        self.identity = identity
        self.clock = clock
        self._fd: int | None = None
        self._epoch: int | None = None
        self._since: float | None = None

    # ---- protocol ------------------------------------------------------------------------
    def acquire(self) -> bool:
        if self._fd is not None:
            if self._still_ours():
                return True
            self._drop()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot open the leader lock: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        held = _parse(_read_fd(fd))
        epoch = int(held.get("epoch", 0)) + 1 if isinstance(held.get("epoch"), int) else 1
        now = self.clock.now()
        _write_fd(fd, {"leader": self.identity, "epoch": epoch, "since": now,
                       "pid": os.getpid()})
        self._fd, self._epoch, self._since = fd, epoch, now
        return True

    def fence(self) -> int | None:
        if self._fd is None or not self._still_ours():
            return None
        return self._epoch

    def status(self) -> LeaderStatus:
        if self._fd is not None and self._still_ours():
            return LeaderStatus(Role.LEADER, self._epoch, self.identity, self.mechanism,
                                None, self._since)
        try:
            held = _parse(self.path.read_bytes())
        except OSError:
            held = {}
        who = held.get("leader") if isinstance(held.get("leader"), str) else None
        epoch = held.get("epoch") if isinstance(held.get("epoch"), int) else None
        since = held.get("since") if isinstance(held.get("since"), (int, float)) else None
        pid = held.get("pid")
        detail = (f"another controller holds {self.path}"
                  + (f" ({who}, pid {pid})" if who else "") + ": not acting, serving reads")
        return LeaderStatus(Role.STANDBY, epoch, who, self.mechanism, detail,
                            float(since) if since is not None else None)

    # ---- ours ----------------------------------------------------------------------------
    def release(self) -> None:
        """Give the lock up (on shutdown); a standby takes it at its next ``acquire()``."""
        self._drop()

    def _drop(self) -> None:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
        self._fd = self._epoch = self._since = None

    def _still_ours(self) -> bool:
        """The lock file we hold is still the one at the path (not removed and re-made)."""
        assert self._fd is not None
        try:
            st, mine = os.stat(self.path), os.fstat(self._fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _read_fd(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096)


def _write_fd(fd: int, data: dict[str, Any]) -> None:
    raw = json.dumps(data, sort_keys=True).encode()
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, raw)
    os.fsync(fd)


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        got = json.loads(raw.decode("utf-8", "replace")) if raw.strip() else {}
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}

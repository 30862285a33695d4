"""``minutiae serve``'s store and leadership from ``--store`` (alias ``--db``): a SQLite file
(one actor per file: ``SqliteFileLock``) or ``postgresql://…`` (replicas share it; leader by
advisory lock + epoch, renewed in a thread of its own)."""

from __future__ import annotations

from pathlib import Path

from minutiae.clock import Clock
from minutiae.controller.leadership import Leadership, SqliteFileLock
from minutiae.controller.store import ControllerStore, Store, is_postgres

__all__ = ["open_replica", "state_dir"]


def open_replica(where: str, identity: str, clock: Clock, *, pool: int = 4
                 ) -> tuple[ControllerStore, Leadership]:
    """The store and the leadership for ``where``; ``identity`` names this replica."""
    if is_postgres(where):
        from minutiae.controller.ha.pg_lock import PgAdvisoryLeadership
        from minutiae.controller.store.postgres import PgStore

        store = PgStore(where, identity=identity, size=pool)
        lead = PgAdvisoryLeadership(store, identity, clock)
        lead.start()
        return store, lead
    return Store(where), SqliteFileLock(where, identity, clock)


def state_dir(where: str) -> Path:
    """Where files beside the store go (notifier outboxes): the SQLite file's folder, or the
    working directory for a PostgreSQL store."""
    return Path.cwd() if is_postgres(where) else Path(where).resolve().parent

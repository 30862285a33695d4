"""The controller's store: SQLite (one file, the embedded default) or PostgreSQL (shared by
several replicas, ``--store postgresql://...``). ``open_store`` picks one from the string."""

from __future__ import annotations

from minutiae.controller.store.base import (
    DONE,
    DRY_RUN,
    FAILED,
    HELD,
    PENDING,
    AuditRow,
    ControllerStore,
)
from minutiae.controller.store.sqlite import SCHEMA, Store

__all__ = ["DONE", "DRY_RUN", "FAILED", "HELD", "PENDING", "SCHEMA", "AuditRow",
           "ControllerStore", "Store", "is_postgres", "open_store"]


def is_postgres(where: str) -> bool:
    return where.startswith(("postgresql://", "postgres://"))


def open_store(where: str, *, identity: str = "minutiae", pool: int = 4) -> ControllerStore:
    """``postgresql://…`` / ``postgres://…``: a :class:`PgStore` with a fixed pool of ``pool``
    connections; anything else: a SQLite file path."""
    if is_postgres(where):
        from minutiae.controller.store.postgres import PgStore

        pg: ControllerStore = PgStore(where, identity=identity, size=pool)
        return pg
    return Store(where)

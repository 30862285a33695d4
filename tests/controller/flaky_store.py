"""The SQLite store whose report writes fail while ``down`` (a store that went away), for the
tests of what ingest and the agents do then."""

from __future__ import annotations

from typing import Any

from minutiae.controller.store import Store
from minutiae.errors import StoreError

__all__ = ["FlakyStore"]


class FlakyStore(Store):
    """The SQLite store, whose report writes fail while ``down``."""

    down = False

    def save_reports(self, rows: Any, beats: Any = (), wake: bool = False) -> None:
        if self.down:
            raise StoreError(f"{self.path}: connection refused (test)")
        super().save_reports(rows, beats, wake)

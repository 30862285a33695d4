"""SQLite run-history store (stdlib sqlite3, WAL). Tables are prefixed ``runs_`` so the store can
live in the controller's database file beside its own tables.

The controller calls :func:`record_run` when a job's step timings arrive::

    from minutiae.history.store import RunStore, record_run
    store = RunStore(db_path)                 # same file as the controller's store
    record_run(store, RunRecord(run_id=job_id, time=start, signature=sig,
                                value=median_step_seconds, nodes=nodes,
                                attrs={"driver": frozenset({"570.158.01"})},
                                gpus=world_size, duration_s=end - start))
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

from minutiae.errors import StoreError
from minutiae.history.record import Metric, RunRecord

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs_schema (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs_runs (
    run_id TEXT PRIMARY KEY,
    time REAL NOT NULL,
    signature TEXT NOT NULL,
    metric TEXT NOT NULL,
    value REAL NOT NULL CHECK (value > 0),
    gpus INTEGER,
    duration_s REAL
);
CREATE INDEX IF NOT EXISTS runs_runs_sig_time ON runs_runs (signature, time);
CREATE INDEX IF NOT EXISTS runs_runs_time ON runs_runs (time);
CREATE TABLE IF NOT EXISTS runs_nodes (
    run_id TEXT NOT NULL REFERENCES runs_runs(run_id) ON DELETE CASCADE,
    pos INTEGER NOT NULL,
    node TEXT NOT NULL,
    PRIMARY KEY (run_id, pos)
);
CREATE INDEX IF NOT EXISTS runs_nodes_node ON runs_nodes (node);
CREATE TABLE IF NOT EXISTS runs_attrs (
    run_id TEXT NOT NULL REFERENCES runs_runs(run_id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,            -- '' records a known-missing value
    PRIMARY KEY (run_id, key, value)
);
"""


class RunStore:
    """Run history in SQLite at ``path`` (``:memory:`` works for tests)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            self._db = sqlite3.connect(self.path, timeout=10.0)
            self._db.execute("PRAGMA foreign_keys = ON")
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT version FROM runs_schema").fetchone()
            if row is None:
                self._db.execute("INSERT INTO runs_schema (version) VALUES (?)", (SCHEMA_VERSION,))
            elif row[0] != SCHEMA_VERSION:
                raise StoreError(f"{self.path}: run history schema {row[0]}, expected {SCHEMA_VERSION}")
            self._db.commit()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open run history: {exc}") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def put(self, records: Iterable[RunRecord]) -> int:
        """Insert or replace runs (by ``run_id``) in one transaction; returns how many."""
        n = 0
        try:
            with self._db:
                for r in records:
                    self._db.execute(
                        "INSERT OR REPLACE INTO runs_runs (run_id, time, signature, metric, value, gpus,"
                        " duration_s) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (r.run_id, r.time, r.signature, r.metric.value, r.value, r.gpus, r.duration_s))
                    self._db.execute("DELETE FROM runs_nodes WHERE run_id = ?", (r.run_id,))
                    self._db.execute("DELETE FROM runs_attrs WHERE run_id = ?", (r.run_id,))
                    self._db.executemany("INSERT INTO runs_nodes (run_id, pos, node) VALUES (?, ?, ?)",
                                         [(r.run_id, i, n) for i, n in enumerate(r.nodes)])
                    rows = [(r.run_id, k, v) for k, vals in r.attrs.items() for v in (vals or {""})]
                    self._db.executemany("INSERT INTO runs_attrs (run_id, key, value) VALUES (?, ?, ?)", rows)
                    n += 1
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot record runs: {exc}") from None
        return n

    def load(self, since: float | None = None, signature: str | None = None) -> list[RunRecord]:
        """Runs with ``time >= since`` (and of ``signature``), in time order."""
        where: list[str] = []
        args: list[float | str] = []
        if since is not None:
            where.append("time >= ?")
            args.append(since)
        if signature is not None:
            where.append("signature = ?")
            args.append(signature)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        try:
            runs = self._db.execute(
                "SELECT run_id, time, signature, metric, value, gpus, duration_s FROM runs_runs"
                + clause + " ORDER BY time, run_id", args).fetchall()
            nodes: dict[str, list[str]] = {}
            for run_id, node in self._db.execute(
                    "SELECT n.run_id, n.node FROM runs_nodes n JOIN runs_runs r USING (run_id)"
                    + clause.replace("time", "r.time").replace("signature", "r.signature")
                    + " ORDER BY n.run_id, n.pos", args):
                nodes.setdefault(run_id, []).append(node)
            attrs: dict[str, dict[str, set[str]]] = {}
            for run_id, key, value in self._db.execute(
                    "SELECT a.run_id, a.key, a.value FROM runs_attrs a JOIN runs_runs r USING (run_id)"
                    + clause.replace("time", "r.time").replace("signature", "r.signature"), args):
                vals = attrs.setdefault(run_id, {}).setdefault(key, set())
                if value:
                    vals.add(value)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read runs: {exc}") from None
        return [RunRecord(run_id=rid, time=t, signature=sig, value=v, metric=Metric(m),
                          nodes=tuple(nodes.get(rid, ())),
                          attrs={k: frozenset(s) for k, s in attrs.get(rid, {}).items()},
                          gpus=g, duration_s=d)
                for rid, t, sig, m, v, g, d in runs]

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM runs_runs").fetchone()[0])

    def attribute_keys(self) -> Sequence[str]:
        return [k for (k,) in self._db.execute("SELECT DISTINCT key FROM runs_attrs ORDER BY key")]


def record_run(store: RunStore, record: RunRecord) -> None:
    """Record one run (idempotent: the same ``run_id`` replaces the previous row)."""
    store.put([record])

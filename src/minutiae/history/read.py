"""Reads run histories from files (CSV or Parquet), the SQLite store, and the simulator's
``rollouts.csv``/``fleet.csv``. The only I/O of the regression area besides the store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from minutiae.errors import DataError, InputError, ParseError
from minutiae.history.clean import clean_runs
from minutiae.history.issues import HistoryIssue, IssueKind
from minutiae.history.parse import RunLoad, parse_runs_csv, records_from_rows
from minutiae.history.record import RunRecord
from minutiae.history.rollouts import NodeChange, parse_fleet_csv, parse_rollouts_csv
from minutiae.history.store import RunStore
from minutiae.history.usage import join_usage, parse_jobs_csv
from minutiae.inputs import read_bounded

PROM_DEFAULT_WINDOW_S = 30 * 86400.0
#: a runs/rollouts/fleet CSV read whole (bounded by ``minutiae.inputs``; streams get less)
MAX_CSV_BYTES = 1 << 30


def _text(path: Path) -> str:
    data = read_bounded(path, limit=MAX_CSV_BYTES, what="CSV file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ParseError(f"not UTF-8 text (byte {exc.start})", str(path)) from None


def read_runs_file(path: Path) -> RunLoad:
    """A runs CSV, or Parquet (by magic bytes) with the same columns."""
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except FileNotFoundError:
        raise InputError("no such file", str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", str(path)) from None
    if magic == b"PAR1":
        return _read_parquet(path)
    return parse_runs_csv(_text(path), str(path))


def _read_parquet(path: Path) -> RunLoad:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise ParseError(f"unreadable Parquet: {exc}", str(path)) from None
    cols = table.column_names
    rows = [{k: ("" if v is None else (" ".join(map(str, v)) if isinstance(v, list) else str(v)))
             for k, v in row.items()} for row in table.to_pylist()]
    return records_from_rows(rows, cols, str(path))


@dataclass(frozen=True, slots=True)
class History:
    """Cleaned runs in time order with every issue met while loading; ``origin`` names the input."""

    runs: tuple[RunRecord, ...]
    issues: tuple[HistoryIssue, ...]
    origin: str
    columns: tuple[str, ...] = ()


def load_history(runs: Path | None = None, db: Path | None = None, *, now: float | None = None,
                 since: float | None = None, signature: str | None = None,
                 prom: str | None = None) -> History:
    """Load from ``runs`` (CSV/Parquet), ``db`` (the controller's SQLite file) or ``prom`` (a
    Prometheus URL; window ``since``..``now``, 30 days by default), filter by
    ``since``/``signature``, then clean (duplicates, skew, …)."""
    if sum(x is not None for x in (runs, db, prom)) != 1:
        raise InputError("give exactly one of --runs FILE, --db PATH or --prom URL")
    if prom is not None:
        from minutiae.history.read_prometheus import fetch_runs

        if now is None:
            raise InputError("reading runs from Prometheus needs the current time (now)", prom)
        load = fetch_runs(prom, since if since is not None else now - PROM_DEFAULT_WINDOW_S, now)
        records: list[RunRecord] = list(load.records)
        issues = list(load.issues)
        columns = load.columns
        origin = prom
    elif runs is not None:
        load = read_runs_file(runs)
        records = list(load.records)
        issues = list(load.issues)
        columns = load.columns
        origin = str(runs)
        jobs_path = runs.parent / "jobs.csv"
        if jobs_path.is_file() and any(r.gpu_hours() is None or not r.nodes for r in records):
            jobs, more = parse_jobs_csv(_text(jobs_path), str(jobs_path))
            records, joined = join_usage(records, jobs)
            issues += more
            issues.append(HistoryIssue(IssueKind.JOINED, f"GPU counts, durations and node names of {joined} "
                                       f"run(s) taken from {jobs_path} (run_id = job_id)"))
    else:
        assert db is not None
        if not db.exists():
            raise InputError("no such database file", str(db))
        with RunStore(db) as store:
            records = store.load()
            columns = tuple(store.attribute_keys())
        issues = []
        origin = str(db)
        if not records:
            raise DataError("no runs recorded (runs_runs is empty)", origin)
    latest = max(r.time for r in records)
    if signature is not None:
        records = [r for r in records if r.signature == signature]
        if not records:
            raise DataError(f"no runs with signature {signature!r}", origin)
    if since is not None:
        records = [r for r in records if r.time >= since]
        if not records:
            raise DataError(f"no runs since {since:.0f} (latest run at {latest:.0f}); "
                            "widen --since", origin)
    cleaned, more = clean_runs(records, now=now, columns=columns)
    return History(tuple(cleaned), tuple(issues + more), origin, tuple(columns))


def read_rollouts(path: Path) -> tuple[list[NodeChange], list[HistoryIssue]]:
    return parse_rollouts_csv(_text(path), str(path))


def read_fleet(path: Path) -> dict[str, dict[str, str]]:
    return parse_fleet_csv(_text(path), str(path))


def import_runs(path: Path, db: Path) -> tuple[int, list[HistoryIssue]]:
    """Import a runs file into the store at ``db``; returns (runs stored, issues)."""
    load = read_runs_file(path)
    cleaned, issues = clean_runs(load.records, columns=load.columns)
    with RunStore(db) as store:
        n = store.put(cleaned)
    return n, list(load.issues) + issues

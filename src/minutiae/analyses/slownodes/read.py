"""Reading GPU telemetry tables: the simulator's telemetry.parquet with fleet.csv and jobs.csv
(docs/dataset.md). The only I/O of ``minutiae slownodes DIR``; the root is a parameter."""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl

from minutiae.errors import DataError, InputError, ParseError
from minutiae.inputs import read_bounded

TELEMETRY_COLUMNS = ("time", "node", "gpu", "sm_clock_mhz", "power_w", "temp_c",
                     "clock_event_reasons", "pcie_replay", "nvlink_errors", "ib_xmit_mbps", "util",
                     "power_limit_w", "throughput")


def read_telemetry(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise DataError("missing telemetry file (telemetry.parquet of `minutiae sim`)", str(path))
    try:
        if path.suffix == ".csv":
            df = pl.read_csv(path, infer_schema_length=10_000)
        else:
            names = pl.read_parquet_schema(path)
            df = pl.read_parquet(path, columns=[c for c in TELEMETRY_COLUMNS if c in names])
    except (OSError, pl.exceptions.PolarsError, ValueError) as exc:
        raise ParseError(f"unreadable telemetry ({str(exc).splitlines()[0][:160]})", str(path)) from None
    return df


#: the columns fleet.csv and jobs.csv must have (docs/dataset.md)
FLEET_COLUMNS = ("node",)
JOBS_COLUMNS = ("nodes", "start", "end", "job_id")
#: a fleet or jobs table larger than this is not one (a week of 1,024 nodes is ~2 MB)
SIDE_TABLE_LIMIT = 256 << 20
_CSV_ERRORS = (OSError, pl.exceptions.PolarsError, ValueError, OverflowError,
               pl.exceptions.PanicException)  # a Rust panic on a cut quote: stragglers/parse.py


def read_side_table(path: Path, what: str, columns: tuple[str, ...]) -> pl.DataFrame:
    """fleet.csv or jobs.csv (all columns as text) through the bounded reader, with the columns
    it must have checked: any file a user names is refused with one line, never a traceback."""
    data = read_bounded(path, limit=SIDE_TABLE_LIMIT, what=what)
    try:
        df = pl.read_csv(io.BytesIO(data), infer_schema_length=0)
    except _CSV_ERRORS as exc:
        raise ParseError(f"unreadable {what} ({str(exc).splitlines()[0][:160]})", str(path)) from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(f"a {what} needs columns {', '.join(columns)} (missing: "
                        f"{', '.join(missing)})", str(path))
    return df


def read_dataset(root: Path) -> tuple[pl.DataFrame, pl.DataFrame | None, pl.DataFrame | None]:
    """(telemetry, fleet or None, jobs or None) of a dataset directory."""
    if not root.is_dir():
        raise InputError("not a directory (give the --out directory of `minutiae sim`)", str(root))
    fleet, jobs = (read_side_table(root / name, what, cols) if (root / name).is_file() else None
                   for name, what, cols in (("fleet.csv", "fleet CSV", FLEET_COLUMNS),
                                            ("jobs.csv", "jobs CSV", JOBS_COLUMNS)))
    return read_telemetry(root / "telemetry.parquet"), fleet, jobs

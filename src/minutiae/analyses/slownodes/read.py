"""Reading GPU telemetry tables: the simulator's telemetry.parquet with fleet.csv and jobs.csv
(docs/dataset.md). The only I/O of ``minutiae slownodes DIR``; the root is a parameter."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from minutiae.errors import DataError, InputError, ParseError

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


def _csv(path: Path) -> pl.DataFrame | None:
    if not path.is_file():
        return None
    try:
        return pl.read_csv(path, infer_schema_length=0)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise ParseError(f"unreadable CSV ({str(exc).splitlines()[0][:160]})", str(path)) from None


def read_dataset(root: Path) -> tuple[pl.DataFrame, pl.DataFrame | None, pl.DataFrame | None]:
    """(telemetry, fleet or None, jobs or None) of a dataset directory."""
    if not root.is_dir():
        raise InputError("not a directory (give the --out directory of `minutiae sim`)", str(root))
    fleet = _csv(root / "fleet.csv")
    jobs = _csv(root / "jobs.csv")
    for name, df, cols in (("fleet.csv", fleet, ("node",)), ("jobs.csv", jobs, ("nodes", "start", "end", "job_id"))):
        if df is not None and any(c not in df.columns for c in cols):
            raise DataError(f"needs columns {', '.join(cols)}", str(root / name))
    return read_telemetry(root / "telemetry.parquet"), fleet, jobs

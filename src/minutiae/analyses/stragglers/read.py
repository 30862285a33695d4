"""Reading timing files: whole files, growing files (``--follow``), training logs (several
files of one job joined) and the simulator's fleet.csv.

With ``ingest`` (a file of the common layout read straight into the matrix), the only I/O of
the straggler path; everything it returns goes to ``stragglers.parse``.
"""

from __future__ import annotations

import csv
import io
import mmap
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from minutiae.errors import InputError
from minutiae.inputs import MAX_NO_NEWLINE, read_bounded

if TYPE_CHECKING:
    import polars as pl

    from minutiae.analyses.stragglers.formats import TrainLog
    from minutiae.analyses.stragglers.layout import Layout


#: a timing file (CSV, Parquet, training log) read whole; a stream gets inputs.STREAM_LIMIT
MAX_TIMINGS_BYTES = 4 << 30
#: bytes ``CsvTail.read`` takes at most per call (a file that grew by more: the rest next call)
FOLLOW_CHUNK = 16 << 20


def read_bytes(path: Path) -> bytes:
    """Bounded (``minutiae.inputs``): ``/dev/zero`` or a 2 GB sparse file is one line, exit 3."""
    if not path.exists():
        raise InputError("cannot read (No such file or directory)", str(path))
    return read_bounded(path, limit=MAX_TIMINGS_BYTES, what="timing CSV", magic=b"PAR1")


def read_trainlog(paths: list[Path]) -> TrainLog:
    """The training logs of one job (one file per rank or node, rotated pieces) as one."""
    from minutiae.analyses.stragglers.formats import join

    return join([_read_log(p) for p in paths])


def _read_log(path: Path) -> TrainLog:
    """One log, mapped rather than read whole (a 1 GB log is parsed a chunk at a time)."""
    from minutiae.analyses.stragglers.formats import parse_log

    try:
        with path.open("rb") as f:
            if f.seek(0, io.SEEK_END) == 0:
                return parse_log(b"", str(path))
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return parse_log(m, str(path))
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", str(path)) from None


def read_timings(paths: list[Path]) -> tuple[pl.DataFrame, list[str]]:
    """The long timing table of ``paths`` and notes on what was skipped (file:line, count).
    CSV and Parquet files are read as they are; training logs are joined first, so one rank's
    lines in each file still make a per-rank table."""
    import polars as pl

    from minutiae.analyses.stragglers.parse import timings_of

    got, notes = read_timings_or_log(paths)
    if isinstance(got, pl.DataFrame):
        return got, notes
    return timings_of(got, ", ".join(str(p) for p in paths)), notes  # raises: the refusal


def read_timings_or_log(paths: list[Path]) -> tuple[pl.DataFrame | TrainLog, list[str]]:
    """As :func:`read_timings`, but training logs of a known format that have no per-rank times
    (rank 0's step times, slowest-rank reports) come back as the joined ``TrainLog`` for the
    job-level report (``joblevel.analyse_job``); a log with nothing to report is refused."""
    got, notes, _ = read_with_layout(paths)
    return got, notes


def read_with_layout(paths: list[Path],
                     ) -> tuple[pl.DataFrame | TrainLog, list[str], Layout | None]:
    """As :func:`read_timings_or_log`, with the parallel layout the logs print (``None``: none
    printed, or one that cannot be used: a note says why)."""
    import polars as pl

    from minutiae.analyses.stragglers.formats.view import per_rank
    from minutiae.analyses.stragglers.layout import stated
    from minutiae.analyses.stragglers.parse import parse_timings, timings_of
    from minutiae.analyses.stragglers.sniff import PARQUET_MAGIC, looks_like_csv

    frames: list[pl.DataFrame] = []
    logs: list[Path] = []
    for p in paths:
        data = read_bytes(p)
        if data[:4] == PARQUET_MAGIC or looks_like_csv(data) or not data.strip():
            frames.append(parse_timings(data, str(p)))
        else:
            logs.append(p)
    notes: list[str] = []
    layout: Layout | None = None
    if logs:
        log = read_trainlog(logs)
        notes = log.notes()
        has_job = bool(log.formats) and (log.steps.height > 0 or bool(log.evidence))
        if not frames and has_job and per_rank(log).height == 0:
            return log, notes, None
        frames.append(timings_of(log, ", ".join(str(p) for p in logs)))
        layout, why = stated(log.attrs)
        notes += [why] if why else []
    df = frames[0] if len(frames) == 1 else pl.concat(
        [f.select(pl.all().cast(pl.String)) for f in frames], how="diagonal_relaxed")
    return df, notes, layout


def fleet_leaves(path: Path) -> dict[str, str]:
    """node -> leaf from a simulator ``fleet.csv`` (``node,rack,leaf,...``)."""
    text = read_bytes(path).decode("utf-8", errors="replace")
    rows = csv.DictReader(io.StringIO(text))
    if not rows.fieldnames or "node" not in rows.fieldnames or "leaf" not in rows.fieldnames:
        raise InputError("not a fleet.csv: need node and leaf columns", str(path))
    return {r["node"]: r["leaf"] for r in rows if r.get("node") and r.get("leaf")}


def find_fleet(paths: list[Path]) -> Path | None:
    """The dataset's fleet.csv when the timing files sit in a simulator ``timings/`` folder."""
    for p in paths:
        cand = p.resolve().parent.parent / "fleet.csv"
        if p.resolve().parent.name == "timings" and cand.is_file():
            return cand
    return None


class CsvTail:
    """Follows a growing CSV: ``read`` returns the complete lines appended since the last call
    (a partial last line waits for its newline); ``header`` is the file's first line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.header: str | None = None
        self._partial = b""

    def read(self) -> bytes:
        try:
            with self.path.open("rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # /dev/zero, a fifo
                    raise InputError("not a regular file: --follow reads a growing CSV file",
                                     str(self.path))
                size = f.seek(0, io.SEEK_END)
                if size < self.offset:  # truncated or replaced: start again
                    self.offset, self.header, self._partial = 0, None, b""
                f.seek(self.offset)
                chunk = f.read(FOLLOW_CHUNK)   # the rest on the next call: memory stays bounded
        except FileNotFoundError:
            return b""
        except IsADirectoryError:
            raise InputError("is a directory, expected a CSV file", str(self.path)) from None
        except OSError as exc:
            raise InputError(f"cannot read ({exc.strerror or exc})", str(self.path)) from None
        self.offset += len(chunk)
        data = self._partial + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > MAX_NO_NEWLINE:
                raise InputError(f"no line end in {len(data)} bytes: not a CSV file",
                                 str(self.path))
            self._partial = data
            return b""
        self._partial = data[cut + 1:]
        data = data[:cut + 1]
        if self.header is None:
            nl = data.find(b"\n")
            self.header = data[:nl].decode("utf-8", errors="replace").strip()
            data = data[nl + 1:]
        return data

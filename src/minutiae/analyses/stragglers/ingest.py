"""Reading a timing file of the common layout straight into the matrix (the I/O of
``dense``): a Parquet file a batch at a time, a CSV file's columns a slice at a time.

Read: step, rank, seconds and the per-rank columns (node, gpu, stage, leaf), and a
``section`` column when every row is a step total (one name: empty, ``step``, ``total``...).
Whatever else a file holds (time, calls, notes) is never read, as the general path ignores
it. Anything that does not fit gives None, and the general path
(``read.read_timings_or_log``) reads the file, refuses it or repairs it as before: a stream,
a file over the size limit, NUL bytes in a CSV's first block, an unreadable Parquet file.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from minutiae.analyses.stragglers.dense import COLUMNS, KEYS, DenseGrid, plain_columns, with_keys
from minutiae.analyses.stragglers.read import MAX_TIMINGS_BYTES
from minutiae.analyses.stragglers.table import TOTAL_NAMES
from minutiae.inputs import BINARY_PROBE

if TYPE_CHECKING:
    import pyarrow as pa

    from minutiae.analyses.stragglers.prep import TimingMatrix

__all__ = ["BLOCK_ROWS", "read_matrix"]

#: rows handed to ``DenseGrid`` at a time (bounds the temporaries of its checks)
BLOCK_ROWS = 1 << 20
#: a Parquet footer claiming more rows than this (an 8 GB matrix) is left to the general path
#: rather than allocated from what the footer says
MAX_ROWS = 1 << 31


def read_matrix(paths: list[Path]) -> TimingMatrix | None:
    """The matrix of one CSV or Parquet file of the common layout, read a block at a time
    without the long table; None for anything else (module docstring)."""
    from minutiae.analyses.stragglers.sniff import PARQUET_MAGIC, looks_like_csv

    if len(paths) != 1:
        return None
    try:
        st = os.stat(paths[0])
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_TIMINGS_BYTES:
            return None
        with paths[0].open("rb") as f:
            head = f.read(BINARY_PROBE)
    except OSError:
        return None
    if head[:4] == PARQUET_MAGIC:
        return _parquet_matrix(paths[0])
    first = head.split(b"\n", 1)[0].decode("utf-8", errors="replace")
    if looks_like_csv(head) and b"\0" not in head and first.strip():
        return _csv_matrix(paths[0], first.split(","))
    return None


class _Totals:
    """The names a ``section`` column holds (stripped, null as empty): one total name, or the
    rows are not all step totals."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def add(self, values: list[str | None]) -> bool:
        self.names.update("" if v is None else v.strip() for v in values)
        return len(self.names) <= 1

    def ok(self) -> bool:
        return all(n.lower() in TOTAL_NAMES for n in self.names)


def _all_totals(values: list[str | None]) -> bool:
    totals = _Totals()
    return totals.add(values) and totals.ok()


class _Codes:
    """A column as integers to compare: numbers as they are, text as the same code for the
    same text in every batch (a Parquet dictionary differs per row group); ``values`` turns
    the first step's codes back into what the file holds."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.text = False

    def of(self, arr: pa.Array) -> np.ndarray:
        import pyarrow as pa
        import pyarrow.compute as pc

        if pa.types.is_integer(arr.type):
            return np.asarray(arr.to_numpy(zero_copy_only=False))
        self.text = True
        enc = arr if pa.types.is_dictionary(arr.type) else pc.dictionary_encode(arr)
        lut = np.array([self.index.setdefault(w, len(self.index))
                        for w in enc.dictionary.to_pylist()], dtype=np.int64)
        return np.asarray(lut[enc.indices.to_numpy(zero_copy_only=False)])

    def values(self, codes: np.ndarray) -> list[str] | np.ndarray:
        if not self.text:
            return codes
        text = list(self.index)
        return [text[int(c)] for c in codes]


#: what each column read may hold in a Parquet file (anything else: the general path)
_KINDS = {"step": {"int"}, "rank": {"int"}, "seconds": {"float"}, "gpu": {"int"},
          "stage": {"int", "text"}, "node": {"text"}, "leaf": {"text"}, "section": {"text"}}


def _kind(t: pa.DataType) -> str:
    import pyarrow as pa

    if pa.types.is_dictionary(t):  # categorical text (numbers so stored take the general path)
        return "text" if _kind(t.value_type) == "text" else ""
    if t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32()):
        return "int"
    if t in (pa.float32(), pa.float64()):
        return "float"
    text = pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
    return "text" if text else ""


def _parquet_matrix(path: Path) -> TimingMatrix | None:
    """A Parquet file a batch at a time (mapped, one thread: 1.6 s of CPU for 100,000 x 1,000
    where a read copy and decoding threads took 2.6 s on two loaded cores)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path, memory_map=True).names
        text = [c for c in ("node", "leaf", "stage", "section") if c in names]
        with pq.ParquetFile(path, memory_map=True, read_dictionary=text) as pf:  # text as codes
            keys = [c for c in KEYS if c in names]
            cols = [*COLUMNS, *keys, *(["section"] if "section" in names else [])]
            if not plain_columns(names) or any(
                    _kind(pf.schema_arrow.field(c).type) not in _KINDS[c] for c in cols):
                return None
            rows = pf.metadata.num_rows
            if not 0 < rows <= MAX_ROWS:
                return None
            grid = DenseGrid(rows, pf.schema_arrow.field("seconds").type == pa.float64())
            codes = {c: _Codes() for c in keys}
            totals = _Totals()
            for b in pf.iter_batches(batch_size=BLOCK_ROWS, columns=cols, use_threads=False):
                if any(b.column(c).null_count for c in (*COLUMNS, *keys)) or (
                        "section" in cols and not totals.add(b.column("section").unique()
                                                             .to_pylist())):
                    return None
                step, rank, sec = (b.column(c).to_numpy(zero_copy_only=False) for c in COLUMNS)
                if not grid.feed(step, sec, [rank, *(codes[c].of(b.column(c)) for c in keys)]):
                    return None
    except (pa.ArrowException, OSError, ValueError, KeyError, MemoryError):
        return None
    m = grid.matrix()
    if m is None or not totals.ok():
        return None
    return with_keys(m, {c: codes[c].values(f) for c, f in zip(keys, grid.fixed[1:], strict=True)})


def _csv_matrix(path: Path, header: list[str]) -> TimingMatrix | None:
    """A CSV file's columns, parsed as ``parse.parse_csv`` parses them (the same reader and
    options: a cell it cannot read is null here too, and sends the file to the general
    path), then handed over a slice at a time; text columns compared by their hash, as
    ``runs.segment_ids`` compares nodes."""
    import polars as pl

    from minutiae.analyses.stragglers.parse import POLARS_ERRORS

    if not plain_columns(header):
        return None
    keys = [c for c in KEYS if c in header]
    cols = [*COLUMNS, *keys, *(["section"] if "section" in header else [])]
    try:
        with warnings.catch_warnings():  # ragged lines are truncated on purpose (parse_csv)
            warnings.simplefilter("ignore", UserWarning)
            df = pl.read_csv(path, columns=cols, infer_schema_length=0,
                             truncate_ragged_lines=True, encoding="utf8-lossy",
                             ignore_errors=True, schema_overrides={
                                 "step": pl.Int32, "rank": pl.Int32, "seconds": pl.Float64})
    except POLARS_ERRORS:
        return None
    if "gpu" in keys:  # as table._columns casts it
        df = df.with_columns(pl.col("gpu").cast(pl.Int64, strict=False))
    if df.height == 0 or any(df[c].null_count() for c in (*COLUMNS, *keys)) or (
            "section" in cols and not _all_totals(df["section"].unique().to_list())):
        return None
    grid = DenseGrid(df.height, True)
    for p in df.iter_slices(BLOCK_ROWS):
        if not grid.feed(p["step"].to_numpy(), p["seconds"].to_numpy(), [
                p["rank"].to_numpy(), *(p[c].to_numpy() if c == "gpu"
                                        else p[c].hash(seed=0).to_numpy() for c in keys)]):
            return None
    m = grid.matrix()
    if m is None:
        return None
    first = df.head(m.ranks.size)
    return with_keys(m, {c: first[c].to_numpy() if c in ("gpu", "stage") else first[c].to_list()
                         for c in keys})


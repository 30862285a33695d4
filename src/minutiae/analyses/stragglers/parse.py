"""Per-rank step timings (pure: bytes in, a long table out).

Accepted: CSV with a header holding at least ``step,rank,seconds`` (or ``ms``), optional
``node,gpu,stage,section`` (DESIGN.md contract; other columns ignored); Parquet with the same
columns (the simulator's ``timings/<job_id>.parquet``); training logs of the frameworks in
``analyses.stragglers.formats`` (Megatron-LM, DeepSpeed, NeMo, torchtitan, ...) when they hold
per-rank times. Column checks, bad values and units are handled by ``analyses.stragglers.prep``;
this module only turns bytes into a table or raises ``ParseError``/``DataError`` naming
``where`` (for a log: the format recognised, what is missing, the first line verbatim).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping

import polars as pl

from minutiae.analyses.stragglers.formats import TrainLog, parse_log, per_rank, refusal
from minutiae.analyses.stragglers.sniff import PARQUET_MAGIC, looks_like_csv
from minutiae.errors import DataError, ParseError

NUMERIC = {"step": pl.Int64, "rank": pl.Int64, "seconds": pl.Float64, "ms": pl.Float64}
#: what polars raises on input it cannot read; a panic of its Rust code (PanicException, a
#: BaseException) too: a CSV whose last line is cut inside a quote panicked the reader
POLARS_ERRORS = (pl.exceptions.PolarsError, ValueError, OSError, UnicodeDecodeError, OverflowError,
                 pl.exceptions.PanicException)


def parse_timings(data: bytes, where: str) -> pl.DataFrame:
    """The long table in ``data`` (CSV, Parquet or a training log with per-rank times)."""
    if not data.strip():
        raise DataError("empty file", where)
    if data[:4] == PARQUET_MAGIC:
        try:
            return pl.read_parquet(io.BytesIO(data)).rechunk()  # to_numpy then copies nothing
        except POLARS_ERRORS as exc:
            raise ParseError(f"unreadable Parquet ({_short(exc)})", where) from None
    if looks_like_csv(data):
        return parse_csv(data, where)
    return timings_of(parse_log(data, where), where)


def timings_of(log: TrainLog, where: str) -> pl.DataFrame:
    """A training log's per-rank rows, or the one refusal that says what it lacks."""
    rows = per_rank(log)
    if rows.height == 0:
        err = DataError if log.formats else ParseError
        raise err(refusal(log), where)
    return rows


def _read_csv(body: bytes, typed: Mapping[str, type[pl.DataType]]) -> pl.DataFrame:
    with warnings.catch_warnings():  # ragged lines are truncated on purpose
        warnings.simplefilter("ignore", UserWarning)
        return pl.read_csv(io.BytesIO(body), infer_schema_length=0, truncate_ragged_lines=True,
                           encoding="utf8-lossy", ignore_errors=True, schema_overrides=typed)


def parse_csv(data: bytes, where: str, header: str | None = None) -> pl.DataFrame:
    """CSV bytes; ``header`` supplies the column line for a chunk read from a growing file."""
    body = (header.encode() + b"\n" + data) if header is not None else data
    first = header if header is not None else body[:4096].split(b"\n", 1)[0].decode(
        "utf-8", errors="replace")
    names = {c.strip() for c in first.split(",")}
    typed = {c: t for c, t in NUMERIC.items() if c in names}  # bad cells -> null, counted later
    cut = body.rfind(b"\n") + 1
    if 0 < cut < len(body) and b'"' in body[cut:]:
        # a file cut inside a quoted field: polars 1.x panics on it, or reads `"0.9` as 0.0; that
        # partial last line is no value (as a training log's is not), the lines before it are
        body = body[:cut]
    try:
        df = _read_csv(body, typed)
    except POLARS_ERRORS as exc:
        raise ParseError(f"not a timing CSV ({_short(exc)})", where) from None
    if df.width < 3 and not header:
        line = body[:4096].split(b"\n", 1)[0].decode("utf-8", errors="replace").rstrip("\r")
        raise ParseError("not a timing CSV: need a header with at least step,rank,seconds; "
                         f'first line: "{line[:300]}"', where)
    return df


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]

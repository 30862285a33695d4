"""Per-rank step timings (pure: bytes in, a long table out).

Accepted: CSV with a header holding at least ``step,rank,seconds`` (or ``ms``), optional
``node,gpu,stage,section`` (DESIGN.md contract; other columns ignored); Parquet with the same
columns (the simulator's ``timings/<job_id>.parquet``); Megatron-LM logs (``parsers.megatron``).
Column checks, bad values and units are handled by ``analyses.stragglers_prep``; this module
only turns bytes into a table or raises ``ParseError``/``DataError`` naming ``where``.
"""

from __future__ import annotations

import io
import warnings

import polars as pl

from minutiae.analyses.stragglers.parse_megatron import looks_like_megatron, parse_megatron
from minutiae.errors import DataError, ParseError

PARQUET_MAGIC = b"PAR1"
NUMERIC = {"step": pl.Int64, "rank": pl.Int64, "seconds": pl.Float64, "ms": pl.Float64}
_POLARS_ERRORS = (pl.exceptions.PolarsError, ValueError, OSError, UnicodeDecodeError, OverflowError)


def parse_timings(data: bytes, where: str) -> pl.DataFrame:
    """The long table in ``data`` (CSV, Parquet or a Megatron log)."""
    if not data.strip():
        raise DataError("empty file", where)
    if data[:4] == PARQUET_MAGIC:
        try:
            return pl.read_parquet(io.BytesIO(data))
        except _POLARS_ERRORS as exc:
            raise ParseError(f"unreadable Parquet ({_short(exc)})", where) from None
    text = data.decode("utf-8", errors="replace")
    if looks_like_megatron(text):
        log = parse_megatron(text)
        if log.ranks.height == 0:
            raise DataError(
                f"Megatron log with {log.iterations.height} iteration line(s) but no per-rank "
                "timers: rerun with --timing-log-option all to compare ranks", where)
        return log.ranks
    return parse_csv(data, where)


def parse_csv(data: bytes, where: str, header: str | None = None) -> pl.DataFrame:
    """CSV bytes; ``header`` supplies the column line for a chunk read from a growing file."""
    body = (header.encode() + b"\n" + data) if header is not None else data
    first = header if header is not None else body[:4096].split(b"\n", 1)[0].decode(
        "utf-8", errors="replace")
    names = {c.strip() for c in first.split(",")}
    typed = {c: t for c, t in NUMERIC.items() if c in names}  # bad cells -> null, counted later
    try:
        with warnings.catch_warnings():  # ragged lines are truncated on purpose
            warnings.simplefilter("ignore", UserWarning)
            df = pl.read_csv(io.BytesIO(body), infer_schema_length=0, truncate_ragged_lines=True,
                             encoding="utf8-lossy", ignore_errors=True, schema_overrides=typed)
    except _POLARS_ERRORS as exc:
        raise ParseError(f"not a timing CSV ({_short(exc)})", where) from None
    if df.width < 3 and not header:
        raise ParseError("not a timing CSV: need a header with at least step,rank,seconds "
                         f"(got {', '.join(df.columns)[:120] or 'nothing'})", where)
    return df


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]

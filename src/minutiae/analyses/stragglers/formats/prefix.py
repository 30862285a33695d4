"""Launcher and log-shipper prefixes, stripped from every line before a format sees it (pure).

What puts text in front of a training framework's own line:

- ``docker compose logs``: the service's container name, padding and a bar
  (``training-nlp-azure-1  | ``), before any of the others;
- log shippers / ``kubectl logs --timestamps`` / journald exports: an ISO-8601 time and one
  space (``2024-10-23T01:29:30.123456789Z ``, ``2024-10-23 01:29:30,123 ``); the line's own
  indentation after it is kept (Megatron's timer lines are indented);
- ``srun -l`` / ``srun --label``: the task id and a colon, right-aligned (`` 0: ``, ``15: ``);
- OpenMPI ``--tag-output``: ``[1,15]<stdout>:``;
- torchrun ``--tee``/``--log-dir``: ``[default15]:`` (the *local* rank) or ``[rank15]:`` (global).

The rank comes from the most specific prefix: ``[rankN]`` or OpenMPI's rank is global;
``[defaultN]`` is a local rank, made global with the ``srun -l`` task (one task per node:
``task * ranks_per_node + local``, ``ranks_per_node`` = the largest local rank seen + 1); an
``srun -l`` label alone is the rank. The vectorised form (``strip_frame``) is what readers use.
"""

from __future__ import annotations

import polars as pl

#: one separator only: the line's own indentation is part of it (Megatron's timer blocks)
_TS = r"(?:\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s)?"
_SRUN = r"(?:\s{0,6}(?P<task>\d{1,6}):\s)?"
_MPI = r"(?:\[\d+,(?P<mpi>\d+)\]<std(?:out|err)>:\s?)?"
_TORCHRUN = r"(?:\[(?P<kind>default|rank)(?P<local>\d{1,6})\]:)?"
_COMPOSE = r"(?:[A-Za-z0-9][\w.-]*\s+\|\s)?"
PREFIX = "^" + _COMPOSE + _TS + _SRUN + _MPI + _TORCHRUN


#: what every prefix starts with (a cheap test: a log without any is left as it is)
_ANY = (r"^(?:\[?\d{4}-\d{2}-\d{2}[T ]|\s{0,6}\d{1,6}:\s|\[\d+,\d+\]<std|"
        r"\[(?:default|rank)\d|[A-Za-z0-9][\w.-]*\s+\|\s)")


def strip_frame(lines: pl.DataFrame, column: str = "line") -> pl.DataFrame:
    """``lines`` with ``column`` stripped of its prefixes and a nullable ``prefix_rank`` column."""
    if not lines.select(pl.col(column).str.contains(_ANY).any()).item():
        return lines.with_columns(pl.lit(None, pl.Int64).alias("prefix_rank"))
    parts = pl.col(column).str.extract_groups(PREFIX)
    df = lines.with_columns(parts.alias("_p"))
    df = df.with_columns(
        pl.col("_p").struct.field("task").cast(pl.Int64, strict=False).alias("_task"),
        pl.col("_p").struct.field("mpi").cast(pl.Int64, strict=False).alias("_mpi"),
        pl.col("_p").struct.field("kind").alias("_kind"),
        pl.col("_p").struct.field("local").cast(pl.Int64, strict=False).alias("_local"),
        pl.col(column).str.replace(PREFIX, "").alias(column),
    )
    per_node = df.select(pl.col("_local").filter(pl.col("_kind") == "default").max()).item()
    per_node = int(per_node) + 1 if per_node is not None else 1
    rank = (pl.when(pl.col("_kind") == "rank").then(pl.col("_local"))
            .when(pl.col("_mpi").is_not_null()).then(pl.col("_mpi"))
            .when((pl.col("_kind") == "default") & pl.col("_task").is_not_null())
            .then(pl.col("_task") * per_node + pl.col("_local"))
            .when(pl.col("_kind") == "default").then(pl.col("_local"))
            .otherwise(pl.col("_task")))
    return df.with_columns(rank.alias("prefix_rank")).drop("_p", "_task", "_mpi", "_kind", "_local")


def strip_line(line: str) -> tuple[int | None, str]:
    """One line: (rank from its prefix or None, the line without prefixes)."""
    df = strip_frame(pl.DataFrame({"line": [line]}))
    rank = df["prefix_rank"][0]
    return (None if rank is None else int(rank)), str(df["line"][0])

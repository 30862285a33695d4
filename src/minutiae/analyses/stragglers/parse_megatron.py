"""Megatron-LM training logs (pure: text in, rows out): the ``formats.megatron`` reader as the
``MegatronLog`` this module has always returned (its shapes are documented there).

``ranks``: step,rank,seconds,section rows (``--timing-log-option all``), ``iterations``:
step,seconds (the job's step time), ``minmax``: step,section,min_seconds,max_seconds,
``bad_lines``: lines that started a known record but could not be read (reported, never guessed).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from minutiae.analyses.stragglers.formats import megatron as _mega
from minutiae.analyses.stragglers.formats.parse import parse_log


@dataclass(frozen=True, slots=True)
class MegatronLog:
    ranks: pl.DataFrame
    iterations: pl.DataFrame
    minmax: pl.DataFrame
    bad_lines: int


def looks_like_megatron(text: str) -> bool:
    head = text[:200_000]
    return any(s in head for s in _mega.SIGNS)


def parse_megatron(text: str) -> MegatronLog:
    data = text.encode()
    log = parse_log(data if data.endswith(b"\n") else data + b"\n", "megatron log")
    ranks = log.ranks.select(pl.col("step").cast(pl.Int64), pl.col("rank").cast(pl.Int64),
                             pl.col("seconds").cast(pl.Float64),
                             pl.col("section").cast(pl.String))
    iterations = log.steps.filter(pl.col("seconds").is_not_null()).select(
        "step", "seconds").unique("step", keep="last", maintain_order=True)
    bad = sum(s.count for s in log.skipped if "Megatron" in s.reason)
    return MegatronLog(ranks, iterations, log.minmax, bad)

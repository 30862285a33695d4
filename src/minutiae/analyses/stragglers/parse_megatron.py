"""Megatron-LM training logs (pure: text in, rows out).

What Megatron prints (``megatron/training/training.py`` ``training_log`` and
``megatron/core/timers.py``), on the last rank, every ``--log-interval`` iterations::

     [2024-01-15 10:30:00] iteration      100/  500000 | consumed samples: 12800 |
       elapsed time per iteration (ms): 1234.5 | learning rate: ... | lm loss: ... |
    times across ranks (ms):                  <- --timing-log-option all
      forward-backward:
         rank  0: 1180.20
         rank  1: 1181.02
    (min, max) time across ranks (ms):        <- --timing-log-option minmax (the default)
        forward-backward ...............: (1180.20, 1190.31)

Some forks print ``elapsed time per iteration (ms): 1234.5/1200.0`` (value/running mean) or
``iteration=  100/ 500000 | ... elapsed_time_per_iteration_ms=1234.5``. Timer blocks follow the
iteration line they belong to and are averages over the interval.

Only ``--timing-log-option all`` gives per-rank times (``ranks``); iteration lines give the job's
step time (``iterations``), min/max blocks a spread (``minmax``) but no rank. Timers nested in
``forward-backward`` (``forward-compute``, ``backward-compute``, ``forward-recv`` ...) are dropped
when ``forward-backward`` is present, so sections never double count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

_ITER = re.compile(
    r"iteration[\s=]+(?P<it>\d+)\s*/\s*(?:\d+|infinity)\s*\|.*?"
    r"elapsed[ _]time[ _]per[ _]iteration[ _]\(?ms\)?\s*[:=]\s*(?P<ms>[0-9.]+(?:[eE][+-]?\d+)?)")
_ALL = re.compile(r"^\s*times across ranks \(ms\):\s*$")
_MINMAX = re.compile(r"^\s*(?:\(min, max\)|max) time across ranks \(ms\):")
_NAME = re.compile(r"^\s{1,4}(?P<name>[A-Za-z0-9_./-][^:]*?):\s*$")
_RANK = re.compile(r"^\s+rank\s+(?P<rank>\d+):\s*(?P<ms>[0-9.]+(?:[eE][+-]?\d+)?)\s*$")
_MM = re.compile(r"^\s+(?P<name>\S.*?)\s*\.*:\s*\(?(?P<a>[0-9.]+)(?:,\s*(?P<b>[0-9.]+)\))?\s*$")
_NESTED = r"^(forward|backward)-"


@dataclass(frozen=True, slots=True)
class MegatronLog:
    """``ranks``: step,rank,seconds,section rows (per-rank timers); ``iterations``: step,seconds
    (job step time); ``minmax``: step,section,min_seconds,max_seconds; ``bad_lines``: lines that
    started a known record but could not be read (reported, never guessed)."""

    ranks: pl.DataFrame
    iterations: pl.DataFrame
    minmax: pl.DataFrame
    bad_lines: int


def looks_like_megatron(text: str) -> bool:
    head = text[:200_000]
    return bool(_ITER.search(head) or "time across ranks (ms)" in head)


def parse_megatron(text: str) -> MegatronLog:
    it_rows: list[tuple[int, float]] = []
    rank_rows: list[tuple[int, int, float, str]] = []
    mm_rows: list[tuple[int, str, float, float]] = []
    step = -1
    mode = ""  # "all", "minmax" or "" (outside a timer block)
    name = ""
    bad = 0
    for line in text.splitlines():
        m = _ITER.search(line)
        if m:
            step = int(m["it"])
            it_rows.append((step, float(m["ms"]) / 1000.0))
            mode = ""
            continue
        if _ALL.match(line):
            mode, name = "all", ""
            continue
        if _MINMAX.match(line):
            mode = "minmax"
            continue
        if mode == "all":
            r = _RANK.match(line)
            if r and name:
                rank_rows.append((step, int(r["rank"]), float(r["ms"]) / 1000.0, name))
                continue
            n = _NAME.match(line)
            if n:
                name = n["name"].strip()
                continue
        elif mode == "minmax":
            mm = _MM.match(line)
            if mm:
                a = float(mm["a"]) / 1000.0
                b = float(mm["b"]) / 1000.0 if mm["b"] else a
                mm_rows.append((step, mm["name"].strip(" ."), a, b))
                continue
        if mode and line.strip():
            mode = ""
        if "elapsed time per iteration" in line and not m:
            bad += 1
    ranks = pl.DataFrame(rank_rows, schema={"step": pl.Int64, "rank": pl.Int64,
                                            "seconds": pl.Float64, "section": pl.String},
                         orient="row")
    if ranks.height and (ranks["section"] == "forward-backward").any():
        nested = pl.col("section").str.contains(_NESTED) & (pl.col("section") != "forward-backward")
        ranks = ranks.filter(~nested)
    ranks = ranks.filter(pl.col("step") >= 0)
    iterations = pl.DataFrame(it_rows, schema={"step": pl.Int64, "seconds": pl.Float64},
                              orient="row")
    minmax = pl.DataFrame(mm_rows, schema={"step": pl.Int64, "section": pl.String,
                                           "min_seconds": pl.Float64, "max_seconds": pl.Float64},
                          orient="row")
    return MegatronLog(ranks, iterations, minmax, bad)

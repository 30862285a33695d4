"""Megatron-LM and Megatron-DeepSpeed iteration lines and timer blocks (pure, vectorised).

Shapes, from the frameworks' own format strings:

- Megatron-LM ``megatron/training/training.py`` ``training_log``:
  `` [2025-11-13 16:27:01] iteration      100/  500000 | consumed samples: 12800 | elapsed time
  per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 402.1 | learning rate: ...``;
- Megatron-DeepSpeed (``megatron/training_log.py``, argonne-lcf): `` iteration=     100/  500000 |
  consumed_samples= ... | elapsed_time_per_iteration_ms=1234.5 | ... samples_per_second=9.1 |
  tokens_per_gpu_per_second_tgs=4621.3 | [LM]TFLOPs=180.20 | [DS]TFLOPs=190.1 |``, and the older
  ``samples per second: 9.1 | tokens per gpu per second (tgs): 4621.3 | TFLOPs: 180.2 |``;
- nanotron (same keys, ``iteration: 5 / 100 | ... elapsed_time_per_iteration_ms: 1.2K |``);
- ``megatron/core/timers.py``: ``times across ranks (ms):`` / ``  name:`` / ``     rank  N: ms``
  (``--timing-log-option all``), ``(min, max) time across ranks (ms):`` /
  ``    name ........: (min, max)`` (``minmax``, the default) and ``max time across ranks (ms):``
  / ``    name ........: max`` (``max``).

The frame holds one file's lines (``no``, ``line`` without launcher prefixes, ``prefix_rank``);
rank lines (the bulk of an ``all`` log) are read with one regex pass and take their step and
timer name from the header lines before them (an as-of join on the line number), so a 1 GB log
is read at polars speed. Timers nested in ``forward-backward`` are dropped when it is present.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

NAME = "megatron"
_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?\d+)?)"
ITER = (r"iteration[\s=:]+(\d+)\s*/\s*(?:\d+|infinity)\s*\|.*?"
        r"elapsed[ _]time[ _]per[ _]iteration[ _]\(?ms\)?\s*[:=]\s*" + _NUM + r"([KM]?)")
_TFLOPS = r"(?:TFLOP/s/GPU\)|\[DS\]TFLOPs|TFLOPs|hardware_tflops_per_gpu)\s*[:=]\s*" + _NUM
_TOKENS = r"(?:tokens_per_sec|tokens_per_gpu_per_second_tgs|\(tgs\))\s*[:=]\s*" + _NUM + r"([KM]?)"
_SAMPLES = r"samples[ _]per[ _]second\s*[:=]\s*" + _NUM
_ALL = r"^\s*times across ranks \(ms\):\s*$"
_MMH = r"^\s*(\(min, max\)|max) time across ranks \(ms\):"
_NAMEL = r"^\s{1,4}([A-Za-z0-9_./-][^:]*?):\s*$"
_RANK = r"^\s+rank\s+(\d+):\s*" + _NUM + r"\s*$"
_MM = r"^\s+(\S.*?)\s*\.*:\s*\(?" + _NUM + r"(?:,\s*" + _NUM + r"\))?\s*$"
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6}
SIGNS = ("elapsed time per iteration", "elapsed_time_per_iteration", "time across ranks (ms)")


@dataclass(frozen=True, slots=True)
class Carry:
    """State at the end of a chunk: the last iteration, the open block and timer name."""

    step: int | None = None
    mode: str = ""
    section: str = ""


@dataclass(frozen=True, slots=True)
class Found:
    ranks: pl.DataFrame      # step, rank, seconds, section (compact dtypes)
    steps: pl.DataFrame      # step, rank, seconds, tokens_per_s, samples_per_s, tflops, mfu, line
    minmax: pl.DataFrame
    rest: pl.DataFrame       # the lines no Megatron record consumed (for the other formats)
    bad: pl.DataFrame        # no, line: started an iteration line but could not be read
    carry: Carry
    key_value: int           # iteration lines in Megatron-DeepSpeed's key=value shape
    orphans: pl.DataFrame    # no: ``rank N: ms`` lines outside a block (a log cut mid-block)


def _num(expr: pl.Expr, pattern: str, group: int = 1) -> pl.Expr:
    return expr.str.extract(pattern, group).cast(pl.Float64, strict=False)


def read(lines: pl.DataFrame, carry: Carry, taken: pl.DataFrame | None = None) -> Found:
    """Megatron records in one chunk of lines; ``carry`` is the state the previous chunk left;
    ``taken``: rank lines already read from the bytes (``no``, ``rank``, ``seconds``:
    ``formats.fastrank``), placed in their blocks like the rank lines of ``lines``."""
    line = pl.col("line")
    is_rank = line.str.contains(r"^\s+rank\s+\d+:")
    ranks_l = lines.filter(is_rank)
    other = lines.filter(~is_rank)
    it = line.str.extract(ITER, 1).cast(pl.Int64, strict=False)
    kind = (pl.when(it.is_not_null()).then(pl.lit("it"))
            .when(line.str.contains(_ALL)).then(pl.lit("ah"))
            .when(line.str.contains(_MMH)).then(pl.lit("mh"))
            .when(line.str.contains(_NAMEL)).then(pl.lit("n"))
            .when(line.str.contains(_MM)).then(pl.lit("m"))
            .when(line.str.strip_chars() == "").then(pl.lit("b"))
            .otherwise(pl.lit("o")))
    seed = pl.DataFrame({"no": [-1], "line": [""], "prefix_rank": [None], "_it": [carry.step],
                         "_kind": ["seed"], "_seed_mode": [carry.mode],
                         "_seed_sec": [carry.section]},
                        schema={"no": pl.Int64, "line": pl.String, "prefix_rank": pl.Int64,
                                "_it": pl.Int64, "_kind": pl.String, "_seed_mode": pl.String,
                                "_seed_sec": pl.String})
    o = other.with_columns(it.alias("_it"), kind.alias("_kind"),
                           pl.lit(None, pl.String).alias("_seed_mode"),
                           pl.lit(None, pl.String).alias("_seed_sec"))
    o = pl.concat([seed, o.select(seed.columns)], how="vertical_relaxed")
    k = pl.col("_kind")
    mode = (pl.when(k == "seed").then(pl.col("_seed_mode"))
            .when(k.is_in(["it", "o"])).then(pl.lit(""))
            .when(k == "ah").then(pl.lit("all"))
            .when(k == "mh").then(pl.lit("mm")))
    o = o.with_columns(mode.forward_fill().fill_null("").alias("_mode"),
                       pl.col("_it").forward_fill().alias("_step"))
    sec = (pl.when(k == "seed").then(pl.col("_seed_sec"))
           .when(k == "ah").then(pl.lit(""))
           .when((k == "n") & (pl.col("_mode") == "all"))
           .then(line.str.extract(_NAMEL, 1).str.strip_chars()))
    o = o.with_columns(sec.forward_fill().fill_null("").alias("_sec"))
    last = o.row(-1, named=True)
    new_carry = Carry(last["_step"], last["_mode"], last["_sec"])
    state = o.select("no", "_step", "_mode", "_sec")
    o = o.filter(k != "seed")
    steps = _steps(o.filter(k == "it"))
    mm = o.filter((k == "m") & (pl.col("_mode") == "mm"))
    minmax = mm.select(  # step -1: before the first iteration (setup timers)
        pl.col("_step").fill_null(-1).alias("step"),
        line.str.extract(_MM, 1).str.strip_chars(" .").alias("section"),
        (_num(line, _MM, 2) / 1000.0).alias("min_seconds"),
        (pl.coalesce(_num(line, _MM, 3), _num(line, _MM, 2)) / 1000.0).alias("max_seconds"))
    consumed = k.is_in(["it", "ah", "mh"]) | ((k == "n") & (pl.col("_mode") == "all")) | (
        (k == "m") & (pl.col("_mode") == "mm"))
    bad = o.filter(~consumed & line.str.contains("elapsed[ _]time[ _]per[ _]iteration")).select(
        "no", "line")
    rest = o.filter(~consumed & (k != "b")).select("no", "line", "prefix_rank")
    ranks, orphans = _ranks(ranks_l, state, taken)
    kv = o.filter((k == "it") & line.str.contains("elapsed_time_per_iteration_ms=")).height
    return Found(ranks, steps, minmax, rest, bad, new_carry, kv, orphans)


def _steps(it: pl.DataFrame) -> pl.DataFrame:
    line = pl.col("line")
    ms = _num(line, ITER, 2) * line.str.extract(ITER, 3).replace_strict(
        _SCALE, default=1.0, return_dtype=pl.Float64)
    tokens = _num(line, _TOKENS, 1) * line.str.extract(_TOKENS, 2).fill_null("").replace_strict(
        _SCALE, default=1.0, return_dtype=pl.Float64)
    return it.select(
        pl.col("_it").alias("step"), pl.col("prefix_rank").alias("rank"),
        (ms / 1000.0).alias("seconds"), tokens.alias("tokens_per_s"),
        _num(line, _SAMPLES).alias("samples_per_s"), _num(line, _TFLOPS).alias("tflops"),
        pl.lit(None, pl.Float64).alias("mfu"), pl.col("no").alias("line"),
        pl.lit(NAME).alias("source"))


def _ranks(rl: pl.DataFrame, state: pl.DataFrame,
           taken: pl.DataFrame | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rank value lines with the step, block and timer name of the state line before them
    (``state`` starts with the carried-over state at line -1)."""
    schema = {"step": pl.Int32, "rank": pl.Int32, "seconds": pl.Float32,
              "section": pl.Categorical}
    if rl.height == 0 and (taken is None or taken.height == 0):
        return pl.DataFrame(schema=schema), pl.DataFrame(schema={"no": pl.Int64})
    # "     rank 12: 1180.20" split at the colon (one pass, no regex)
    parts = pl.col("line").str.strip_chars_start().str.split_exact(":", 1)
    vals = rl.select(
        "no", parts.struct.field("field_0").str.slice(4).str.strip_chars()
        .cast(pl.Int32, strict=False).alias("rank"),
        (parts.struct.field("field_1").str.strip_chars().cast(pl.Float64, strict=False) / 1000.0)
        .cast(pl.Float32).alias("seconds"))
    if taken is not None and taken.height:
        vals = taken.merge_sorted(vals, key="no") if vals.height else taken  # both in line order
    return _place(vals, state)


def _place(vals: pl.DataFrame, state: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Each value line takes the step and timer of the last state line at or before it."""
    st = state.select("no", pl.col("_step").cast(pl.Int32),
                      pl.col("_sec").cast(pl.Categorical),
                      ((pl.col("_mode") == "all") & (pl.col("_sec") != "")
                       & pl.col("_step").is_not_null()).alias("_ok"))
    vals = vals.join_asof(st, on="no", strategy="backward")
    ok = pl.col("_ok") & pl.col("rank").is_not_null() & pl.col("seconds").is_not_null()
    orphans = vals.filter(~ok)
    keep = vals.filter(ok).select(pl.col("_step").alias("step"), "rank", "seconds",
                                  pl.col("_sec").alias("section"))
    return keep, orphans.select("no")


def drop_nested(ranks: pl.DataFrame) -> pl.DataFrame:
    """Timers nested in ``forward-backward`` double count it: dropped when it is present."""
    names = ranks["section"].unique().cast(pl.String).to_list() if ranks.height else []
    if "forward-backward" in names:
        drop = [n for n in names if n and n != "forward-backward"
                and (n.startswith("forward-") or n.startswith("backward-"))]
        return ranks.filter(~pl.col("section").is_in(drop)) if drop else ranks
    return ranks

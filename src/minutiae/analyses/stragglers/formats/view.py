"""What a ``TrainLog`` offers the straggler path: per-rank rows, or one clear refusal (pure)."""

from __future__ import annotations

import polars as pl

from minutiae.analyses.stragglers.formats.registry import READERS
from minutiae.analyses.stragglers.formats.types import TrainLog

_ADVICE = {r.name: r.advice for r in READERS}
_ADVICE["megatron"] = ("rerun with --timing-log-option all (Megatron prints per-rank timer "
                       "values only with that option)")


def per_rank(log: TrainLog) -> pl.DataFrame:
    """``step,rank,seconds,section`` rows: the per-rank timers, else step lines of two or more
    ranks (per-rank logs, or one log whose lines carry launcher rank prefixes); else empty.
    With ``node,gpu`` too when NCCL's init lines placed every one of those ranks (a rank's
    node is then named, as a CSV with those columns names it)."""
    return placed(_rows(log), log)


def _rows(log: TrainLog) -> pl.DataFrame:
    if log.ranks.height and log.ranks.select(pl.col("rank").n_unique()).item() >= 2:
        return log.ranks
    s = log.steps.filter(pl.col("rank").is_not_null() & pl.col("seconds").is_not_null())
    if s.select(pl.col("rank").n_unique()).item() < 2:
        return log.ranks.clear()
    return s.group_by("step", "rank", maintain_order=True).agg(pl.col("seconds").last()).select(
        pl.col("step").cast(pl.Int32), pl.col("rank").cast(pl.Int32),
        pl.col("seconds").cast(pl.Float32), pl.lit("").cast(pl.Categorical).alias("section"))


def placed(rows: pl.DataFrame, log: TrainLog) -> pl.DataFrame:
    """``rows`` with each rank's node and GPU from ``log.places`` when all its ranks have one."""
    if rows.height == 0 or not log.places:
        return rows
    where = pl.DataFrame({"rank": [r for r, _, _ in log.places], "node": [h for _, h, _ in log.places],
                          "gpu": [d for _, _, d in log.places]},
                         schema={"rank": pl.Int32, "node": pl.String, "gpu": pl.Int32})
    ranks = rows.select(pl.col("rank").unique())
    if ranks.join(where, on="rank", how="anti").height:
        return rows  # some rank was not placed: no half-named table
    return rows.join(where, on="rank", how="left", maintain_order="left")


def describe(log: TrainLog) -> str:
    """``megatron (120 step lines, 0 per-rank values)`` style summary of what was read."""
    n_steps = log.steps.height
    return (f"{' + '.join(log.formats) or 'no known format'} ({n_steps} step line(s), "
            f"{log.ranks.height} per-rank value(s), {len(log.evidence)} slowest-rank report(s))")


def refusal(log: TrainLog) -> str:
    """The one line said when ``per_rank`` is empty: what was recognised, what is missing and the
    first line verbatim."""
    first = f'first line: "{log.first_line}"'
    if log.skipped:
        first = f"{first} (skipped {'; '.join(log.notes()[:2])})"
    if not log.formats:
        return ("not a timing CSV (need a header with at least step,rank,seconds) nor a training "
                "log of a known format (Megatron-LM, Megatron-DeepSpeed, DeepSpeed, NeMo, "
                "torchtitan, PyTorch Lightning, Hugging Face Trainer, nvidia-resiliency-ext; "
                f"see docs/trainlogs.md); {first}")
    ranks = sorted(set(log.steps["rank"].drop_nulls().to_list())
                   | set(log.ranks["rank"].to_list()))
    who = f"rank {ranks[0]} only" if len(ranks) == 1 else "no rank named"
    fmt = log.formats[0]
    advice = _ADVICE["megatron"] if fmt.startswith("megatron") else _ADVICE.get(fmt, "")
    slowest = (f"; it names the slowest rank of {len(log.evidence)} interval(s) (in the "
               "job-level report of `minutiae stragglers`)") if log.evidence else ""
    lines = "iteration" if fmt.startswith("megatron") else "step"
    return (f"recognised a {' + '.join(log.formats)} log with {log.steps.height} {lines} line(s) "
            f"({who}) but no per-rank times to compare ranks: {advice}{slowest}; {first}")

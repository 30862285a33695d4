"""What every training-log reader returns (frozen; polars frames with fixed schemas)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

#: per-rank timer rows: seconds of ``section`` ("" = the step total) on ``rank`` at ``step``
RANK_SCHEMA = {"step": pl.Int64, "rank": pl.Int64, "seconds": pl.Float64, "section": pl.String}
#: one row per logged step (or logging interval): the job's own figures; any may be null.
#: ``rank``: who printed it (from the line or its launcher prefix; null when unknown);
#: ``line``: its line number; ``source``: the format that read it
STEP_SCHEMA = {"step": pl.Int64, "rank": pl.Int64, "seconds": pl.Float64,
               "tokens_per_s": pl.Float64, "samples_per_s": pl.Float64, "tflops": pl.Float64,
               "mfu": pl.Float64, "line": pl.Int64, "source": pl.String}
MINMAX_SCHEMA = {"step": pl.Int64, "section": pl.String, "min_seconds": pl.Float64,
                 "max_seconds": pl.Float64}


@dataclass(frozen=True, slots=True)
class Evidence:
    """A log line that names the slowest rank of an interval (Megatron's StragglerDetector,
    nvidia-resiliency-ext reports). ``value``: what the log gave (``MxRtt`` ms, or the rank's
    relative score, 1.0 = as fast as the best); ``spread``: how much slower than the fastest
    rank (fraction: ``MxRtt/MnRtt - 1``, ``1/score - 1``); ``line``: the line verbatim;
    ``where``: file:line."""

    source: str
    rank: int
    step: int | None
    value: float
    spread: float | None
    line: str
    where: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """Lines that started a known record but could not be read: the first one's file:line, why,
    and how many such lines."""

    where: str
    reason: str
    count: int

    def describe(self) -> str:
        more = f" (+{self.count - 1} more)" if self.count > 1 else ""
        return f"{self.where}: {self.reason}{more}"


@dataclass(frozen=True, slots=True)
class Rows:
    """What one format reader found in one file."""

    ranks: list[tuple[int, int, float, str]] = field(default_factory=list)
    steps: list[tuple[int, int | None, float | None, float | None, float | None, float | None,
                      float | None, int, str]] = field(default_factory=list)
    minmax: list[tuple[int, str, float, float]] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TrainLog:
    """Everything read from the training logs of one job. ``formats``: the formats recognised
    (registry names); ``first_line``: the first non-empty line of the first file, verbatim;
    ``totals``: whole-run figures (``hf-trainer.train_steps_per_second``, ...); ``attrs``: the
    run's environment as the log printed it (``nccl``, ``cuda_driver``, ``nccl_net``,
    ``env.NCCL_*``, ...: name -> the values seen, as ``RunRecord.attrs``; ``formats.environment``);
    ``hosts``: the hosts its NCCL lines name, first seen first."""

    formats: tuple[str, ...]
    ranks: pl.DataFrame
    steps: pl.DataFrame
    minmax: pl.DataFrame
    evidence: tuple[Evidence, ...]
    skipped: tuple[Skipped, ...]
    first_line: str
    lines: int
    totals: tuple[tuple[str, float], ...] = ()
    attrs: Mapping[str, frozenset[str]] = field(default_factory=dict)
    hosts: tuple[str, ...] = ()
    #: the largest NCCL communicator's size and where each of its ranks ran (rank, host, GPU)
    world: int = 0
    places: tuple[tuple[int, str, int], ...] = ()

    def notes(self) -> list[str]:
        return [s.describe() for s in self.skipped]


def empty(schema: dict[str, pl.DataType] | dict[str, type[pl.DataType]]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)

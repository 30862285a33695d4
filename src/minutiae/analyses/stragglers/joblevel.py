"""Job-level analysis of a training log (pure): what a log with only rank 0's step times, or
only the slowest rank per interval, still tells.

- **Change points inside the run**: binary segmentation of log step time (a step's time is
  the slowest printed rank's; progress-bar redraws of one step kept once), each split tested
  against the run's own noise (robust: MAD of successive differences, so a level shift does
  not inflate it) at a threshold that grows with the number of positions tried; a split is
  kept when it is significant and at least ``min_change``. Each change says whether it held
  to the end or the next segment went back (``"step time +6.2 % from iteration 500, held"``).
- **Throughput**: medians after warm-up of what the log printed (tokens/s, samples/s, TFLOPs,
  MFU), overall and after the last change.
- **Slowest-rank reports** (Megatron's StragglerDetector, nvidia-resiliency-ext): a rank named
  the slowest in at least half of the intervals (and two or more) is a suspect, with the
  lines quoted; others named are listed with their counts.
- :func:`job_record`: the run as a ``RunRecord`` for the run history (``regress`` sees it);
  :func:`log_record` with the environment the log printed (NCCL, CUDA driver, network,
  ``NCCL_*`` settings: ``formats.environment``) as attributes and the hosts of its NCCL lines
  as nodes, so ``regress`` and ``whatchanged`` can name "nccl 2.21.5 → 2.28.9".

Seam for the straggler CLI: ``analyse_job(log) -> JobReport`` (``log`` from
``formats.parse_log``/``join``), ``JobReport.lines()`` for text, ``to_json()`` for ``--json``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from minutiae.errors import DataError
from minutiae.history.record import Metric, RunRecord

if TYPE_CHECKING:
    import polars as pl

    from minutiae.analyses.stragglers.formats.types import Evidence, TrainLog

#: step-time sources preferred on a tie (Megatron's iteration time includes data loading;
#: DeepSpeed's breakdown sums fwd + bwd + step only)
PRIORITY = ("megatron", "nemo", "torchtitan", "lightning", "hf-trainer", "deepspeed")
#: fewest steps on each side of a change point
MIN_SEGMENT = 8
MAX_CHANGES = 6
#: a rank named the slowest in at least this share of intervals is a suspect
NAMED_SHARE = 0.5
#: the node an nvidia-resiliency-ext report line names (``Rank=76 Node=h100-001 Score=0.98``)
_NODE = re.compile(r"\bNode=(\S+)")


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """Step time changed by ``change`` (fraction, + = slower) from ``step`` on; ``held``: it
    lasted to the end of the log, else ``until`` is the step where the next change began."""

    step: int
    change: float
    before_s: float
    after_s: float
    z: float
    held: bool
    until: int | None

    def text(self, unit: str) -> str:
        word = "iteration" if unit == "seconds" else "step"
        tail = "held" if self.held else f"until {word} {self.until}"
        what = "step time" if unit == "seconds" else "time per token"
        return f"{what} {self.change * 100:+.1f} % from {word} {self.step}, {tail}"

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "change": round(self.change, 6), "before": self.before_s,
                "after": self.after_s, "z": round(self.z, 2), "held": self.held,
                "until": self.until}


@dataclass(frozen=True, slots=True)
class Throughput:
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    tflops: float | None = None
    mfu: float | None = None

    def to_json(self) -> dict[str, float | None]:
        return {"tokens_per_s": self.tokens_per_s, "samples_per_s": self.samples_per_s,
                "tflops": self.tflops, "mfu": self.mfu}


@dataclass(frozen=True, slots=True)
class SlowRank:
    """A rank the log itself named the slowest in ``named`` of ``intervals`` intervals;
    ``spread``: median of how much slower than the fastest it was; ``evidence``: the first
    lines quoted as ``file:line: text``."""

    rank: int
    source: str
    named: int
    intervals: int
    spread: float | None
    suspect: bool
    evidence: tuple[str, ...]
    since_step: int | None = None   # first interval step the log named it (when printed)
    node: str | None = None         # ``Node=`` of an NVRx report line

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "source": self.source, "named": self.named,
                "intervals": self.intervals, "spread": self.spread, "suspect": self.suspect,
                "evidence": list(self.evidence), "since_step": self.since_step,
                "node": self.node}

    def suspect_json(self) -> dict[str, Any]:
        """The straggler CLI contract (DESIGN.md): rank, node, slowdown, since_step."""
        return {"rank": self.rank, "node": self.node, "slowdown": self.spread,
                "since_step": self.since_step, "basis": f"named-slowest ({self.source})",
                "named": self.named, "intervals": self.intervals,
                "evidence": list(self.evidence)}


@dataclass(frozen=True, slots=True)
class JobReport:
    formats: tuple[str, ...]
    unit: str                       # "seconds" (step time) or "per-token" (1 / tokens per s)
    steps: int
    first_step: int | None
    last_step: int | None
    step_seconds: float | None      # median after warm-up (unit "seconds" only)
    noise: float | None
    changes: tuple[ChangePoint, ...]
    throughput: Throughput
    after_last_change: Throughput
    ranks: tuple[SlowRank, ...]
    notes: tuple[str, ...]

    @property
    def suspects(self) -> tuple[SlowRank, ...]:
        return tuple(r for r in self.ranks if r.suspect)

    def lines(self) -> list[str]:
        out = [f"job-level: {' + '.join(self.formats)}, {self.steps} steps"
               + (f" ({self.first_step}-{self.last_step})" if self.steps else "")
               + (f", median step {self.step_seconds:.4g} s" if self.step_seconds else "")
               + (f", noise {self.noise:.1%}" if self.noise is not None else "")]
        out += [c.text(self.unit) for c in self.changes] or (
            ["no lasting change in step time"] if self.steps else [])
        tp = ", ".join(f"{k} {v:,.4g}" for k, v in self.throughput.to_json().items() if v)
        if tp:
            out.append(f"throughput (median after warm-up): {tp}")
        for r in self.ranks:
            word = "suspect" if r.suspect else "named"
            spread = f", {r.spread:+.1%} vs the fastest" if r.spread is not None else ""
            out.append(f"{word}: rank {r.rank} slowest in {r.named}/{r.intervals} {r.source} "
                       f"interval(s){spread}")
            out += [f"  {e}" for e in r.evidence[:2]] if r.suspect else []
        return out + [f"note: {n}" for n in self.notes]

    def to_json(self) -> dict[str, Any]:
        return {"formats": list(self.formats), "unit": self.unit, "steps": self.steps,
                "first_step": self.first_step, "last_step": self.last_step,
                "step_seconds": self.step_seconds, "noise": self.noise,
                "changes": [c.to_json() for c in self.changes],
                "throughput": self.throughput.to_json(),
                "after_last_change": self.after_last_change.to_json(),
                "ranks": [r.to_json() for r in self.ranks],
                "suspects": [r.rank for r in self.suspects], "notes": list(self.notes)}

    @property
    def slowdowns(self) -> tuple[ChangePoint, ...]:
        """Changes that made steps slower (a finding, exit 1 in the straggler CLI)."""
        return tuple(c for c in self.changes if c.change > 0)

    def straggler_json(self) -> dict[str, Any]:
        """``minutiae stragglers --json`` on a log without per-rank times: the job-level report
        with ``suspects`` as objects (rank, node, slowdown, since_step), as for per-rank input."""
        return {**self.to_json(), "mode": "job-level",
                "suspects": [r.suspect_json() for r in self.suspects]}


def step_series(log: TrainLog) -> tuple[pl.DataFrame, str]:
    """(step, value) of the log's best step series: step seconds when printed (the source with
    most rows; the slowest rank per step), else seconds per token (1 / tokens per s)."""
    import polars as pl

    s = log.steps
    for col, unit in (("seconds", "seconds"), ("tokens_per_s", "per-token"),
                      ("samples_per_s", "per-sample")):
        have = s.filter(pl.col(col).is_not_null() & (pl.col(col) > 0) & pl.col("step").is_not_null())
        if have.height == 0:
            continue
        counts = dict(have.group_by("source").len().iter_rows())
        src = max(counts, key=lambda k: (counts[k], -PRIORITY.index(k) if k in PRIORITY else -99))
        have = have.filter(pl.col("source") == src)
        val = pl.col(col) if col == "seconds" else 1.0 / pl.col(col)
        per = have.with_columns(val.alias("value")).group_by("step", "rank", maintain_order=True)\
            .agg(pl.col("value").last()).group_by("step", maintain_order=True)\
            .agg(pl.col("value").max()).sort("step")
        return per, unit
    return pl.DataFrame(schema={"step": pl.Int64, "value": pl.Float64}), "seconds"


def _sigma(y: np.ndarray) -> float:
    d = np.diff(y)
    if d.size < 2:
        return float("nan")
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def _best_split(y: np.ndarray, lo: int, hi: int) -> tuple[int, float]:
    """The split in y[lo:hi] with the largest two-sample statistic (mean difference over its
    standard error in units of sigma)."""
    seg = y[lo:hi]
    n = seg.size
    c = np.cumsum(seg)
    k = np.arange(MIN_SEGMENT, n - MIN_SEGMENT + 1)
    if k.size == 0:
        return -1, 0.0
    left = c[k - 1] / k
    right = (c[-1] - c[k - 1]) / (n - k)
    stat = np.abs(left - right) / np.sqrt(1.0 / k + 1.0 / (n - k))
    i = int(np.argmax(stat))
    return lo + int(k[i]), float(stat[i])


def change_points(y: np.ndarray, sigma: float, min_change: float) -> list[int]:
    """Indices where a lasting level change begins: binary segmentation on significance, then
    cuts whose neighbouring levels differ by less than ``min_change`` are merged away."""
    if not math.isfinite(sigma) or sigma <= 0:
        sigma = 1e-6
    med = float(np.median(y))
    yc = np.clip(y, med - 6 * sigma - min_change, med + 6 * sigma + min_change)  # one-off spikes
    cuts: list[int] = []
    todo = [(0, yc.size)]
    while todo and len(cuts) < 2 * MAX_CHANGES:
        lo, hi = todo.pop()
        if hi - lo < 2 * MIN_SEGMENT:
            continue
        k, stat = _best_split(yc, lo, hi)
        if k < 0 or stat / sigma < 3.0 + math.sqrt(2.0 * math.log(hi - lo)):
            continue
        cuts.append(k)
        todo += [(lo, k), (k, hi)]
    cuts.sort()
    while cuts:
        bounds = [0, *cuts, yc.size]
        levels = [float(np.median(yc[a:b])) for a, b in zip(bounds, bounds[1:], strict=False)]
        gaps = [abs(levels[i + 1] - levels[i]) for i in range(len(cuts))]
        i = int(np.argmin(gaps))
        if gaps[i] >= math.log1p(min_change) and len(cuts) <= MAX_CHANGES:
            break
        del cuts[i]
    return cuts


def _throughput(df: pl.DataFrame) -> Throughput:
    def med(col: str) -> float | None:
        v = df[col].drop_nulls()
        return float(v.median()) if v.len() else None  # type: ignore[arg-type]

    return Throughput(med("tokens_per_s"), med("samples_per_s"), med("tflops"), med("mfu"))


def _slow_ranks(evidence: tuple[Evidence, ...]) -> tuple[SlowRank, ...]:
    out: list[SlowRank] = []
    for source in dict.fromkeys(e.source for e in evidence):
        items = [e for e in evidence if e.source == source]
        named = Counter(e.rank for e in items)
        for rank, n in named.most_common():
            mine = [e for e in items if e.rank == rank]
            spreads = [e.spread for e in mine if e.spread is not None]
            suspect = n >= 2 and n >= NAMED_SHARE * len(items)
            steps = [e.step for e in mine if e.step is not None]
            node = next((m.group(1) for e in mine if (m := _NODE.search(e.line))), None)
            out.append(SlowRank(rank, source, n, len(items),
                                float(np.median(spreads)) if spreads else None, suspect,
                                tuple(f"{e.where}: {e.line.strip()}" for e in mine[:3]),
                                min(steps) if steps else None, node))
    return tuple(sorted(out, key=lambda r: (not r.suspect, -r.named, r.rank)))


def analyse_job(log: TrainLog, warmup: int = 10, min_change: float = 0.02) -> JobReport:
    """The job-level report of ``log`` (see the module docstring)."""
    import polars as pl

    series, unit = step_series(log)
    notes = list(log.notes())
    steps = series["step"].to_numpy()
    vals = series["value"].to_numpy()
    skip = min(warmup, max(0, steps.size - 2 * MIN_SEGMENT))
    if steps.size and skip:
        notes.append(f"first {skip} step(s) left out as warm-up")
    steps, vals = steps[skip:], vals[skip:]
    y = np.log(vals) if vals.size else vals
    sigma = _sigma(y) if y.size else float("nan")
    cuts = change_points(y, sigma, min_change) if y.size >= 2 * MIN_SEGMENT else []
    bounds = [0, *cuts, y.size]
    levels = [float(np.median(y[a:b])) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    changes = []
    for i, k in enumerate(cuts):
        held = i == len(cuts) - 1 or abs(levels[i + 2] - levels[i]) > abs(levels[i + 1] - levels[i]) / 2
        stat = abs(levels[i + 1] - levels[i]) / (sigma if sigma > 0 else 1e-6)
        changes.append(ChangePoint(int(steps[k]), math.expm1(levels[i + 1] - levels[i]),
                                   math.exp(levels[i]), math.exp(levels[i + 1]), stat, held,
                                   None if held else int(steps[cuts[i + 1]])))
    rows = log.steps.filter(pl.col("step").is_not_null())
    if steps.size:
        rows = rows.filter(pl.col("step") >= int(steps[0]))
    after = rows.filter(pl.col("step") >= changes[-1].step) if changes else rows
    if not steps.size and not log.evidence:
        notes.append("no step time, throughput or slowest-rank line in the log")
    return JobReport(
        log.formats, unit, int(steps.size) + skip, int(series["step"][0]) if series.height else None,
        int(series["step"][-1]) if series.height else None,
        float(np.exp(np.median(y))) if y.size and unit == "seconds" else None,
        math.expm1(sigma) if math.isfinite(sigma) else None, tuple(changes), _throughput(rows),
        _throughput(after), _slow_ranks(log.evidence), tuple(notes))


def job_record(report: JobReport, run_id: str, signature: str, start: float,
               nodes: tuple[str, ...] = (), attrs: Mapping[str, frozenset[str]] | None = None,
               gpus: int | None = None, duration_s: float | None = None) -> RunRecord:
    """The run for the run history: median step seconds after warm-up, or the median tokens/s
    (samples/s) when the log prints no step time."""
    value: float | None
    metric = Metric.SECONDS_PER_STEP
    value = report.step_seconds
    if value is None and report.throughput.tokens_per_s:
        metric, value = Metric.TOKENS_PER_S, report.throughput.tokens_per_s
    elif value is None and report.throughput.samples_per_s:
        metric, value = Metric.SAMPLES_PER_S, report.throughput.samples_per_s
    if value is None or not value > 0:
        raise DataError("the log has no step time nor throughput to record")
    return RunRecord(run_id=run_id, time=start, signature=signature, value=value, metric=metric,
                     nodes=nodes, attrs=dict(attrs or {}), gpus=gpus, duration_s=duration_s)


def log_record(log: TrainLog, report: JobReport, run_id: str, signature: str,
               start: float) -> RunRecord:
    """:func:`job_record` of ``report`` (the analysis of ``log``) with the environment ``log``
    printed as attributes and the hosts its NCCL lines name as nodes."""
    return job_record(report, run_id, signature, start, nodes=log.hosts, attrs=log.attrs)


def recorded_text(rec: RunRecord) -> str:
    """What a recorded run holds besides its step time: ``nccl 2.28.9, nccl_net IB; 2
    node(s)`` ('' when nothing)."""
    attrs = ", ".join(f"{k} {rec.attr_text(k)}" for k in sorted(rec.attrs))
    nodes = f"{len(rec.nodes)} node(s)" if rec.nodes else ""
    return "; ".join(p for p in (attrs, nodes) if p)

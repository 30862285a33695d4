"""A run's throughput from its per-step timings (pure), for the controller's timing stream.

A synchronous step lasts as long as its slowest rank, so a step's time is the maximum over the
ranks that reported it; the run's value is the median over steps after a warm-up (compilation,
data-loader start, the first checkpoint load), so one slow step cannot move it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping

from minutiae.errors import DataError
from minutiae.history.record import RunRecord

#: steps skipped at the start of a run: this many, or this share of the steps if larger
WARMUP_STEPS = 10
WARMUP_SHARE = 0.05


def step_seconds(rows: Iterable[tuple[int, int, float]], warmup: int | None = None) -> float:
    """Median over steps of the slowest rank's seconds; ``rows`` are (step, rank, seconds)."""
    per_step: dict[int, float] = {}
    for step, _rank, sec in rows:
        if not math.isfinite(sec) or sec <= 0:
            continue
        if sec > per_step.get(step, 0.0):
            per_step[step] = sec
    if not per_step:
        raise DataError("no usable step timings (all missing, zero or not finite)")
    steps = sorted(per_step)
    skip = warmup if warmup is not None else max(WARMUP_STEPS, int(len(steps) * WARMUP_SHARE))
    kept = steps[skip:] if len(steps) > 2 * skip else steps[len(steps) // 2:]
    return float(statistics.median(per_step[s] for s in kept))


def run_from_timings(run_id: str, signature: str, start: float, end: float | None,
                     rows: Iterable[tuple[int, int, float]], nodes: Iterable[str] = (),
                     versions: Mapping[str, Iterable[str]] | None = None,
                     gpus: int | None = None) -> RunRecord:
    """The ``RunRecord`` to pass to :func:`minutiae.history.store.record_run` when a job's
    timings arrive (or when it ends: ``end`` gives its duration)."""
    value = step_seconds(rows)
    attrs = {k: frozenset(v) for k, v in (versions or {}).items()}
    return RunRecord(run_id=run_id, time=start, signature=signature, value=value, nodes=tuple(nodes),
                     attrs=attrs, gpus=gpus,
                     duration_s=(end - start) if end is not None and end >= start else None)

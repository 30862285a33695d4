"""Job step timings → one run in the run history (``minutiae.history``), so regressions across
runs see every job the controller heard about. Called by ``POST /v1/timings``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from minutiae.controller.store.base import ControllerStore
from minutiae.errors import DataError
from minutiae.history.from_timings import run_from_timings
from minutiae.history.record import RunRecord
from minutiae.history.store import RunStore, record_run

#: bounds of a posted timing: steps exact in a float, ranks of a 16 M-GPU job, a week per step
MAX_STEP = 1 << 53
MAX_RANK = 1 << 24
MAX_STEP_SECONDS = 7 * 86400.0
MAX_TIME = 1e11   # Unix seconds (year 5138)


def check_timing(step: int, rank: int | None, seconds: float, where: str = "timings") -> None:
    """Refuse (``DataError``, HTTP 422) a step timing no job can have, before it is stored."""
    if not 0 <= step <= MAX_STEP:
        raise DataError(f"step {step} is outside 0..{MAX_STEP}", where)
    if rank is not None and not 0 <= rank < MAX_RANK:
        raise DataError(f"rank {rank} is outside 0..{MAX_RANK - 1}", where)
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_STEP_SECONDS):
        raise DataError(f"{seconds} seconds per step is outside 0..{MAX_STEP_SECONDS:g}", where)


def check_span(start: float | None, end: float | None, gpus: int | None,
               where: str = "timings") -> None:
    """Refuse a job start/end that is not a finite Unix time, or a GPU count beyond ranks."""
    for name, t in (("start", start), ("end", end)):
        if t is not None and not (math.isfinite(t) and 0 <= t <= MAX_TIME):
            raise DataError(f"{name} {t} is not a Unix time", where)
    if start is not None and end is not None and end < start:
        raise DataError(f"end {end} is before start {start}", where)
    if gpus is not None and not 1 <= gpus <= MAX_RANK:
        raise DataError(f"gpus {gpus} is outside 1..{MAX_RANK}", where)


def record_job_run(store: ControllerStore, job: str, *, signature: str | None = None,
                   start: float | None = None, end: float | None = None,
                   gpus: int | None = None,
                   versions: Mapping[str, Sequence[str]] | None = None) -> RunRecord:
    """Record ``job`` as a run from all its timings stored so far (idempotent: a later post
    replaces the run). Raises ``DataError`` when no timing is usable (all zero, say)."""
    if "://" in store.path:  # the run history lives in SQLite tables beside the audit log
        raise DataError("the run history needs the SQLite store; timings kept, run not recorded")
    rows = store.job_timings(job)
    ranks = {r for _, r, _, _, _ in rows if r is not None}
    nodes = sorted({n for _, _, n, _, _ in rows if n is not None})
    first = min((t for *_, t in rows), default=None)
    rec = run_from_timings(
        job, signature or job, start if start is not None else (first or 0.0), end,
        [(s, r if r is not None else 0, sec) for s, r, _, sec, _ in rows], nodes=nodes,
        versions=versions, gpus=gpus if gpus is not None else (len(ranks) or None))
    with RunStore(store.path) as runs:
        record_run(runs, rec)
    return rec

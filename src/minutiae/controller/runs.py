"""Job step timings → one run in the run history (``minutiae.history``), so regressions across
runs see every job the controller heard about. Called by ``POST /v1/timings``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from minutiae.controller.store import Store
from minutiae.history.from_timings import run_from_timings
from minutiae.history.record import RunRecord
from minutiae.history.store import RunStore, record_run


def record_job_run(store: Store, job: str, *, signature: str | None = None,
                   start: float | None = None, end: float | None = None,
                   gpus: int | None = None,
                   versions: Mapping[str, Sequence[str]] | None = None) -> RunRecord:
    """Record ``job`` as a run from all its timings stored so far (idempotent: a later post
    replaces the run). Raises ``DataError`` when no timing is usable (all zero, say)."""
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

"""Runs the eval detectors (the registry in ``detectors/``) over a dataset: each in this
process or in worker processes; a detector whose modules are not installed/built is reported as
not available — never replaced by anything else.

Whether a finding is an alarm and whether it drains comes from the controller policy
(``controller/default_policy.toml``: ignore / notify / drain). Planned maintenance belongs to
the admins: the controller never drains a node someone else took down, so a finding inside a
maintenance window does not drain (it still counts as an alarm).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from minutiae.errors import MinutiaeError
from minutiae.scoring.score import Detection
from minutiae.sim.dataset import Dataset
from minutiae.sim.eval.detectors import Context, DetectorResult, Failure, detectors
from minutiae.sim.eval.detectors.base import REGISTRY, _missing


def _policy() -> Any:
    try:
        from minutiae.controller.policy import load_policy
    except ImportError:
        return None
    return load_policy()


#: detectors run in this many worker processes (they are independent); 1 = in this process.
#: Workers start from a clean forkserver (forking a process whose polars/arrow thread pools are
#: running can deadlock the child).
DEFAULT_JOBS = 1


def _run_one(spec_name: str, ctx: Context) -> tuple[list[Detection], list[str], int, float, str]:
    spec = REGISTRY.get(spec_name) or next(d for d in detectors() if d.name == spec_name)
    t0 = time.perf_counter()
    try:
        dets, notes, n = spec.run(ctx)
    except MinutiaeError as exc:
        return [], [], 0, time.perf_counter() - t0, f"failed: {exc}"
    except Exception as exc:  # noqa: BLE001 - a detector's bug is reported, the others still run
        return [], [], 0, time.perf_counter() - t0, f"failed: {type(exc).__name__}: {exc}"
    return dets, notes, n, time.perf_counter() - t0, "ok"


def run_detectors(ds: Dataset, names: Iterable[str] | None = None,
                  progress: Callable[[str], None] | None = None,
                  jobs: int | None = None) -> list[DetectorResult]:
    """Every available detector's result, in registry order; ``jobs`` > 1 runs them in that many
    worker processes (a worker that dies, e.g. killed for memory, is reported as failed)."""
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    wanted = set(names) if names is not None else None
    ctx = Context(ds, _policy())
    for t, node, _what in ds.maintenance:
        ctx.maint.setdefault(node, []).append(t)
    specs = [d for d in detectors() if wanted is None or d.name in wanted]
    missing = {d.name: _missing(d.requires) for d in specs}
    runnable = [d for d in specs if missing[d.name] is None]
    jobs = DEFAULT_JOBS if jobs is None else max(1, jobs)
    done: dict[str, tuple[list[Detection], list[str], int, float, str]] = {}
    if jobs > 1 and len(runnable) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(runnable)),
                                 mp_context=multiprocessing.get_context("forkserver")) as pool:
            futs: dict[str, Future[tuple[list[Detection], list[str], int, float, str]]] = {}
            for d in runnable:
                if progress:
                    progress(d.name)
                futs[d.name] = pool.submit(_run_one, d.name, ctx)
            for name, fut in futs.items():
                try:
                    done[name] = fut.result()
                except BrokenProcessPool as exc:
                    done[name] = ([], [], 0, 0.0, f"failed: worker died ({exc})")
    else:
        for d in runnable:
            if progress:
                progress(d.name)
            done[d.name] = _run_one(d.name, ctx)
    results = []
    for d in specs:
        miss = missing[d.name]
        if miss is not None:
            results.append(DetectorResult(d.name, d.what, False, miss))
            continue
        dets, notes, n, secs, status = done[d.name]
        failures = [x for x in notes if isinstance(x, Failure)]
        if failures:
            status = f"{len(failures)} of {n} inputs failed (first: {failures[0]})"
        results.append(DetectorResult(d.name, d.what, True, status, tuple(dets), n, secs, tuple(notes),
                                      len(failures)))
    return results

"""The detector registry of ``minutiae eval``: each detector turns a dataset into detections
by running minutiae's own pipeline pieces (kernel-log rules, counter rules, straggler analysis,
slow-node analysis, regression detection) unchanged. A detector whose modules are not
installed/built is reported as not available — never replaced by anything else.

Whether a finding is an alarm and whether it drains comes from the controller policy
(``controller/default_policy.toml``: ignore / notify / drain). Planned maintenance belongs to
the admins: the controller never drains a node someone else took down, so a finding inside a
maintenance window does not drain (it still counts as an alarm).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from minutiae.errors import MinutiaeError
from minutiae.model import Action, Finding, Severity
from minutiae.scoring.score import Detection
from minutiae.sim.dataset import (
    Dataset,
    read_timings,
)
from minutiae.sim.eval.detectors.base import (  # noqa: F401 - re-exported
    Context,
    DetectorResult,
    DetectorSpec,
    Failure,
    Run,
    _Active,
    _missing,
)
from minutiae.sim.eval.detectors.node import (  # noqa: F401 - re-exported
    COUNTER_CADENCE_S,
    COUNTERS,
    HEARTBEAT_S,
    QUIET_REASONS,
    _ib_counters,
    _kernel_log,
    _telemetry,
    _telemetry_triggers,
)


# ------------------------------------------------------------------ stragglers (per job)
def _stragglers(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.analyses.stragglers.analysis import Options, analyse
    from minutiae.analyses.stragglers.prep import prepare

    leaf_of = {r["node"]: r["leaf"] for r in ctx.ds.fleet}
    opts = Options(ranks_per_node=ctx.ds.gpus)
    out: list[Detection] = []
    notes: list[str] = []
    n = 0
    for job in ctx.ds.jobs:
        path = ctx.ds.timings_path(job.job_id)
        if not path.is_file():
            notes.append(f"{path}: missing")
            continue
        df = read_timings(path)
        step = df["step"].to_numpy()
        in_order = step.size > 1 and bool((step[1:] >= step[:-1]).all())  # the simulator's layout
        logged = (int(np.count_nonzero(step[1:] != step[:-1])) + 1 if in_order
                  else int(np.unique(step).size))
        if logged < opts.warmup + 3:
            notes.append(f"{path}: {logged} logged steps, too few to analyse")
            continue
        n += 1
        try:
            rep = analyse(prepare(df, str(path), leaf_of), opts, str(path))
        except MinutiaeError as exc:
            notes.append(str(exc))
            continue
        except Exception as exc:  # noqa: BLE001 - another area's analysis failing must not stop eval
            notes.append(Failure(f"{path}: straggler analysis failed: {type(exc).__name__}: {exc}"))
            continue
        if not rep.suspects:
            continue
        steps = df.select("step", "time").unique(subset="step").sort("step")
        st, tt = steps["step"].to_numpy(), steps["time"].to_numpy()
        for s in rep.suspects:
            k = min(len(st) - 1, int(np.searchsorted(st, s.detected_step)))
            f = Finding("straggler", Severity.WARNING, Action.NONE,
                        f"{s.component} {s.slowdown:+.1%} slower since step {s.since_step}",
                        component=s.component, attrs={"basis": s.basis.value})
            d = ctx.detection("stragglers", s.node, float(tt[k]), f)
            if d is not None:
                out.append(d)
    return out, notes, n


# ------------------------------------------------------------------ slow nodes (telemetry peers)
def _slownodes(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.analyses.slownodes import analysis as slownodes

    detect = slownodes.detect_dataset
    out: list[Detection] = []
    for s in detect(ctx.ds.root):
        f = Finding("slow_node", Severity.WARNING, Action.NONE, str(getattr(s, "reason", "slow node")))
        d = ctx.detection("slownodes", s.node, float(s.time), f)
        if d is not None:
            out.append(d)
    return out, [], len(ctx.ds.nodes)


# ------------------------------------------------------------------ regressions (runs.csv)
def _regress(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.analyses.regress.detect import find_change_points
    from minutiae.analyses.regress.nodes import node_penalties
    from minutiae.history.read import load_history

    # the one reader of runs.csv: joins jobs.csv beside it and cleans, as `minutiae regress` does
    hist = load_history(runs=ctx.ds.root / "runs.csv")
    notes = [str(i) for i in hist.issues]
    out = []
    # as `minutiae regress`: what the time of day and slow nodes explain is taken out first
    for cp in find_change_points(hist.runs, offsets=node_penalties(hist.runs).penalty):
        if cp.change <= 0:
            continue
        out.append(Detection("regress", None, float(cp.time), "regression", Severity.WARNING, False, None,
                             f"{cp.signature}: {cp.change:+.1%} from run {cp.run_id}",
                             subject=cp.signature))
    return out, notes, len(hist.runs)


DETECTORS: tuple[DetectorSpec, ...] = (
    DetectorSpec("kernel_log", "kernel-log rules over every node's kern.log",
                 ("minutiae.node.sources.kernel_log.parse:parse_lines", "minutiae.rules.log_findings:findings_from_events"),
                 _kernel_log),
    DetectorSpec("ib_counters", "counter rules over the InfiniBand sysfs history (ib.csv)",
                 ("minutiae.node.sources.ib.parse_sysfs:parse_ib_port", "minutiae.rules.counters.model:evaluate"), _ib_counters),
    DetectorSpec("telemetry", "counter rules over the GPU telemetry (DCGM fields)",
                 ("minutiae.node.sources.dcgm.parse:FIELDS", "minutiae.rules.counters.model:evaluate"), _telemetry),
    DetectorSpec("stragglers", "straggler analysis of every job's step timings",
                 ("minutiae.analyses.stragglers.analysis:analyse", "minutiae.analyses.stragglers.prep:prepare"), _stragglers),
    DetectorSpec("slownodes", "slow nodes from passive telemetry peer comparison",
                 ("minutiae.analyses.slownodes.analysis:detect_dataset",), _slownodes),
    DetectorSpec("regress", "change points in runs.csv (performance regressions)",
                 ("minutiae.analyses.regress.detect:find_change_points",), _regress),
)


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
    spec = next(d for d in DETECTORS if d.name == spec_name)
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
    specs = [d for d in DETECTORS if wanted is None or d.name in wanted]
    missing = {d.name: _missing(d.needs) for d in specs}
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

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

import importlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from minutiae.errors import MinutiaeError
from minutiae.model import Action, Finding, Observation, Severity
from minutiae.sim.plan import REBOOT_S
from minutiae.sim.score import Detection
from minutiae.sources.sim_dataset import (
    Dataset,
    ib_rows,
    read_runs,
    read_text,
    read_timings,
    telemetry_batches,
)

Run = Callable[["Context"], tuple[list[Detection], list[str], int]]


@dataclass(frozen=True, slots=True)
class DetectorSpec:
    name: str
    what: str
    needs: tuple[str, ...]          # "module" or "module:attribute"
    run: Run


class Failure(str):
    """A note saying the analysis itself crashed on one input (a bug, not bad input): counted in
    ``DetectorResult.failed`` and named in its status, so a per-input catch never hides it."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class DetectorResult:
    """``available`` False: ``reason`` says which module is missing. ``inputs``: files or jobs
    read; ``notes``: inputs skipped and why (never silently); ``failed``: inputs on which the
    analysis crashed (``Failure`` notes; the status says how many)."""

    name: str
    what: str
    available: bool
    reason: str
    detections: tuple[Detection, ...] = ()
    inputs: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    failed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "what": self.what, "available": self.available,
                "reason": self.reason, "detections": len(self.detections), "inputs": self.inputs,
                "seconds": round(self.seconds, 3), "notes": list(self.notes[:20]),
                "notes_total": len(self.notes), "failed": self.failed}


@dataclass
class Context:
    ds: Dataset
    policy: Any = None
    maint: dict[str, list[float]] = field(default_factory=dict)

    def classify(self, f: Finding) -> tuple[bool, bool]:
        """(alarm, drain) for a finding, by the controller policy when it is available."""
        if self.policy is not None:
            rule = self.policy.rule_for(f)
            do = getattr(getattr(rule, "do", None), "value", "notify")
            if do == "ignore":
                return False, False
            return True, do == "drain"
        return True, f.action.drains

    def in_maintenance(self, node: str, t: float) -> bool:
        settle = float(self.ds.meta.get("sampling", {}).get("boot_settle_s", 180))
        return any(m <= t <= m + REBOOT_S + settle for m in self.maint.get(node, ()))

    def detection(self, name: str, node: str | None, t: float, f: Finding) -> Detection | None:
        alarm, drain = self.classify(f)
        if not alarm:
            return None
        if drain and node is not None and self.in_maintenance(node, t):
            drain = False
        return Detection(name, node, t, f.kind, f.severity, drain, f.code,
                         (f.message or "")[:200])


class _Active:
    """Counter findings are conditions: alarm when one becomes active, not while it stays."""

    def __init__(self) -> None:
        self.keys: set[tuple[str, str]] = set()

    def fresh(self, findings: Iterable[Finding], scope: set[str] | None = None,
              rules: set[str] | None = None) -> list[Finding]:
        """New findings; ``scope``: the components evaluated this time, ``rules``: the rules
        (None: all) — the others keep theirs."""
        cur = {(f.rule or f.kind, f.component or ""): f for f in findings}
        out = [f for k, f in cur.items() if k not in self.keys]
        kept = {k for k in self.keys if (scope is not None and k[1] not in scope)
                or (rules is not None and k[0] not in rules)}
        self.keys = kept | set(cur)
        return out


def _missing(needs: Sequence[str]) -> str | None:
    for need in needs:
        mod, _, attr = need.partition(":")
        try:
            m = importlib.import_module(mod)
        except ImportError as exc:
            return f"{mod} not available ({exc})"
        if attr and not hasattr(m, attr):
            return f"{mod}.{attr} not available"
    return None


# ------------------------------------------------------------------ kernel log
def _kernel_log(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.checks.logrules import findings_from_events
    from minutiae.parsers.kernel_log import parse_lines

    year = datetime.fromtimestamp(ctx.ds.start, tz=None).year
    out: list[Detection] = []
    notes: list[str] = []
    n = 0
    for node in ctx.ds.nodes:
        path = ctx.ds.node_dir(node) / "kern.log"
        if not path.is_file():
            notes.append(f"{path}: missing")
            continue
        n += 1
        events = list(parse_lines(read_text(path).splitlines(), year=year))
        untimed = 0
        for f in findings_from_events(events):
            if f.time is None:
                untimed += 1
                continue
            d = ctx.detection("kernel_log", node, f.time.timestamp(), f)
            if d is not None:
                out.append(d)
        if untimed:
            notes.append(f"{path}: {untimed} finding(s) without a time")
    return out, notes, n


# ------------------------------------------------------------------ IB counters (sysfs replay)
def _ib_counters(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.checks.counters import boot_grace_s, context, counter_rules, evaluate
    from minutiae.parsers.snapshot import SnapshotBuilder
    from minutiae.parsers.sysfs_ib import SOURCE, parse_ib_port

    rules = counter_rules()
    # a rule quiet in a boot's first minutes is judged again when that grace ends (a port that
    # is still down then did not change, so the change log has no row for it)
    graced = tuple(r for r in rules if boot_grace_s(r) > 0)
    grace = max((boot_grace_s(r) for r in graced), default=0.0)
    interval = float(ctx.ds.meta.get("sampling", {}).get("ib_interval_s", 300))
    out: list[Detection] = []
    notes: list[str] = []
    n = 0
    for node in ctx.ds.nodes:
        path = ctx.ds.node_dir(node) / "ib.csv"
        if not path.is_file():
            notes.append(f"{path}: missing")
            continue
        n += 1
        files: dict[tuple[str, str], dict[str, str]] = {}
        prev_vals: dict[tuple[str, str], float] = {}
        rows = list(ib_rows(path))
        active = _Active()
        rates: dict[tuple[str, str], float] = {}
        i = 0
        boots = ctx.ds.boots.get(node, [])
        # at the first sample (every `interval` from the start) at or after the grace's end
        recheck = sorted(ctx.ds.start + math.ceil((b + grace - ctx.ds.start) / interval) * interval
                         for b in boots if grace > 0 and b + grace > ctx.ds.start)
        while i < len(rows) or recheck:
            changed: set[tuple[str, str]] = set()
            regroup = False
            judged = rules
            if recheck and (i >= len(rows) or recheck[0] < rows[i][0]):
                t = recheck.pop(0)  # a boot grace ended: every port is judged again, by the
                judged = graced     # rules with a grace (rates would see no time pass)
            elif recheck and recheck[0] == rows[i][0]:
                t = rows[i][0]      # a sample at that time: the ports it changed are applied
                recheck.pop(0)      # first, then every port is judged by every rule
                regroup = True
                regroup = bool(files)
                if not regroup:
                    continue
            else:
                t = rows[i][0]
            while i < len(rows) and rows[i][0] == t:
                _, dev, port, counter, value = rows[i]
                key = counter if counter in ("state", "phys_state", "rate") else f"counters/{counter}"
                files.setdefault((dev, port), {"link_layer": "InfiniBand"})[key] = value
                changed.add((dev, port))
                regroup |= counter == "rate"
                i += 1
            if any(b - REBOOT_S <= t < b for b in boots):
                continue    # the node is down for a reboot: no agent reads its ports then
            # only the ports that changed can change their findings (all of them when a rate
            # changed: the rate rule compares a port with its node's other ports)
            ports = set(files) if regroup else changed
            b = SnapshotBuilder(SOURCE)
            for dev, port in sorted(ports):
                parse_ib_port(b, dev, port, files[(dev, port)], str(path))
            obs = [Observation(o.source, o.component, o.metric, o.value, t) for o in b.build().observations]
            if not regroup:     # the group rule needs every port's rate
                obs += [Observation(SOURCE, f"ib:{d}/{p}", "rate_gbps", rates[(d, p)], t)
                        for (d, p) in files if (d, p) not in ports and (d, p) in rates]
            for o in obs:
                if o.metric == "rate_gbps" and isinstance(o.value, float):
                    dp = o.component[3:].rsplit("/", 1)
                    rates[(dp[0], dp[1])] = o.value
            previous = {k: (v, t - interval) for k, v in prev_vals.items()}
            up = ctx.ds.uptime(node, t)
            extra = {"node": {"uptime_s": up}} if up is not None else None
            scope = {f"ib:{d}/{p}" for d, p in ports}
            found = [f for f in evaluate(judged, context(obs, previous, t, extra))
                     if (f.component or "") in scope or not (f.component or "").startswith("ib:")]
            only = None if judged is rules else {r.id for r in judged}
            for f in active.fresh(found, scope, only):
                d = ctx.detection("ib_counters", node, t, f)
                if d is not None:
                    out.append(d)
            for o in obs:
                if isinstance(o.value, int | float) and not isinstance(o.value, bool):
                    prev_vals[(o.component, o.metric)] = float(o.value)
    return out, notes, n


# ------------------------------------------------------------------ GPU telemetry (DCGM fields)
QUIET_REASONS = 0x1 | 0x4          # GPU idle, SW power cap: not a slowdown worth a look
HEARTBEAT_S = 86400.0
COUNTER_CADENCE_S = 900.0
COUNTERS = ("pcie_replay", "nvlink_errors", "ecc_sbe", "ecc_dbe")


def _telemetry(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.checks.counters import context, counter_rules, evaluate
    from minutiae.parsers.dcgm import FIELDS
    from minutiae.sim.fleet import gpu_bus
    from minutiae.sim.telemetry import DCGM_FIELDS

    rules = counter_rules()
    g_n = ctx.ds.gpus
    cols = ["time", "node", "gpu", *DCGM_FIELDS, "pcie_width"]
    metric = {c: FIELDS[f][0] for c, (f, _t, _h) in DCGM_FIELDS.items() if f in FIELDS}
    metric["pcie_width"] = FIELDS["DCGM_FI_DEV_PCIE_LINK_WIDTH"][0]
    width_max = FIELDS["DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"][0]
    comps = [f"gpu:0000:{gpu_bus(g)}:00.0" for g in range(g_n)]
    out: list[Detection] = []
    n = 0
    for batch in telemetry_batches(ctx.ds.root / "telemetry.parquet", cols):
        arrs = {c: batch.column(c).to_numpy(zero_copy_only=False) for c in cols if c != "node"}
        nodes = batch.column("node").dictionary_encode()
        codes = nodes.indices.to_numpy(zero_copy_only=False)
        names = nodes.dictionary.to_pylist()
        bounds = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(codes)], strict=True):
            node = str(names[codes[lo]])
            n += 1
            times, ti = np.unique(arrs["time"][lo:hi], return_inverse=True)
            gi = arrs["gpu"][lo:hi].astype(int)
            present = np.zeros((len(times), g_n), dtype=bool)
            present[ti, gi] = True
            grid = {}
            for c in metric:
                m = np.zeros((len(times), g_n), dtype=np.float64)
                m[ti, gi] = arrs[c][lo:hi]
                grid[c] = m
            dirty, node_dirty, cad_s = _telemetry_triggers(grid, present, times)
            last: dict[tuple[str, str], float] = {}
            active = _Active()
            for k in np.flatnonzero(dirty.any(axis=1) | node_dirty):
                t = float(times[k])
                gs = np.flatnonzero(dirty[k])
                obs: list[Observation] = []
                scope = {comps[g] for g in gs}
                for g in gs:
                    if not present[k, g]:
                        continue
                    for c, mname in metric.items():
                        v = grid[c][k, g]
                        obs.append(Observation("dcgm", comps[g], mname,
                                               float(v) if c in ("power_w", "temp_c") else int(v), t))
                    obs.append(Observation("dcgm", comps[g], width_max, 16, t))
                extra: dict[str, dict[str, Any]] | None = None
                if node_dirty[k]:
                    scope.add("node")
                    obs.append(Observation("dcgm", "node", "gpu_count", int(present[k].sum()), t))
                    extra = {"node": {"expected_gpus": g_n, "uptime_s": ctx.ds.uptime(node, t)}}
                prev = {(o.component, o.metric): (last[(o.component, o.metric)], t - cad_s)
                        for o in obs if (o.component, o.metric) in last}
                found = evaluate(rules, context(obs, prev, t, extra))
                for f in active.fresh(found, scope):
                    d = ctx.detection("telemetry", node, t, f)
                    if d is not None:
                        out.append(d)
                for o in obs:
                    if isinstance(o.value, int | float) and not isinstance(o.value, bool):
                        last[(o.component, o.metric)] = float(o.value)
    return out, [], n


def _telemetry_triggers(grid: dict[str, np.ndarray], present: np.ndarray,
                        times: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Which GPUs an agent's check must look at, per sample: a GPU appears/vanishes or its PCIe
    width, >= 80 C reading or non-quiet clock-event reason changes (at once); a counter moved
    (at a 15-minute counter cadence); every GPU once a day. Between those samples every value
    a rule reads is unchanged or quiet, so the rules' outcome is unchanged. Returns the (T, G)
    mask, the (T,) mask of node-level checks (GPU count) and the counter cadence in seconds."""
    t_n = len(times)
    dt = float(times[1] - times[0]) if t_n > 1 else 300.0
    dirty = np.zeros(present.shape, dtype=bool)
    for m in (present, np.where(present, grid["pcie_width"], 0), grid["temp_c"] >= 80,
              grid["clock_event_reasons"].astype(np.int64) & ~QUIET_REASONS):
        dirty[1:] |= m[1:] != m[:-1]
    cad = max(1, int(round(COUNTER_CADENCE_S / dt)))
    idx = np.arange(cad, t_n, cad)
    for c in COUNTERS:
        dirty[idx] |= grid[c][idx] != grid[c][idx - cad]
    beat = np.zeros(t_n, dtype=bool)
    beat[:: max(1, int(HEARTBEAT_S / dt))] = True
    dirty[beat] |= present[beat]
    cnt = present.sum(axis=1)
    node_dirty = beat.copy()
    node_dirty[1:] |= cnt[1:] != cnt[:-1]
    return dirty, node_dirty, cad * dt


# ------------------------------------------------------------------ stragglers (per job)
def _stragglers(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.analyses.stragglers import Options, analyse
    from minutiae.analyses.stragglers_prep import prepare

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
        if df.height == 0 or df["step"].n_unique() < opts.warmup + 3:
            notes.append(f"{path}: {df['step'].n_unique() if df.height else 0} logged steps, too few to analyse")
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
        steps = df.select("step", "time").unique(subset="step").sort("step")
        st, tt = steps["step"].to_numpy(), steps["time"].to_numpy()
        for s in rep.suspects:
            k = min(len(st) - 1, int(np.searchsorted(st, s.detected_step)))
            f = Finding("straggler", Severity.WARNING, Action.NONE,
                        f"{s.component} {s.slowdown:+.1%} slower since step {s.since_step}",
                        component=s.component)
            d = ctx.detection("stragglers", s.node, float(tt[k]), f)
            if d is not None:
                out.append(d)
    return out, notes, n


# ------------------------------------------------------------------ slow nodes (telemetry peers)
def _slownodes(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.analyses import slownodes

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
    from minutiae.analyses.regress import find_change_points

    load = read_runs(ctx.ds.root / "runs.csv")
    notes = [str(i) for i in load.issues]
    out = []
    for cp in find_change_points(load.records):
        if cp.change <= 0:
            continue
        out.append(Detection("regress", None, float(cp.time), "regression", Severity.WARNING, False, None,
                             f"{cp.signature}: {cp.change:+.1%} from run {cp.run_id}"))
    return out, notes, len(load.records)


DETECTORS: tuple[DetectorSpec, ...] = (
    DetectorSpec("kernel_log", "kernel-log rules over every node's kern.log",
                 ("minutiae.parsers.kernel_log:parse_lines", "minutiae.checks.logrules:findings_from_events"),
                 _kernel_log),
    DetectorSpec("ib_counters", "counter rules over the InfiniBand sysfs history (ib.csv)",
                 ("minutiae.parsers.sysfs_ib:parse_ib_port", "minutiae.checks.counters:evaluate"), _ib_counters),
    DetectorSpec("telemetry", "counter rules over the GPU telemetry (DCGM fields)",
                 ("minutiae.parsers.dcgm:FIELDS", "minutiae.checks.counters:evaluate"), _telemetry),
    DetectorSpec("stragglers", "straggler analysis of every job's step timings",
                 ("minutiae.analyses.stragglers:analyse", "minutiae.analyses.stragglers_prep:prepare"), _stragglers),
    DetectorSpec("slownodes", "slow nodes from passive telemetry peer comparison",
                 ("minutiae.analyses.slownodes:detect_dataset",), _slownodes),
    DetectorSpec("regress", "change points in runs.csv (performance regressions)",
                 ("minutiae.analyses.regress:find_change_points",), _regress),
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

"""A history to replay: what every node reported over time, and what the scheduler saw.

``History.events`` is a time-ordered list of ``NodeEvent``\\ s: a node's report changed
(``REPORT``), it went into / came out of planned maintenance (``DOWN``/``UP``: the scheduler
shows it down by an admin, e.g. ``scontrol reboot``, so reconcile never touches it), or the
jobs running on it changed (``JOBS``, for the per-job budget).

Simulated datasets: reports are rebuilt from kern.log and ib.csv (``backtest_signals``); the
agent is taken to report continuously, so each report is stamped with the end of the interval
it covers and never goes stale, except inside maintenance windows where the node is silent.
Findings inside a maintenance window are not replayed (counted in ``suppressed``); with
``honour_maintenance=False`` the windows are ignored, which shows what a controller that does not
know about planned reboots would have done.

Recorded histories (``reports.jsonl``): each line is an agent report (the controller's wire
format) at its own time; a node that stops reporting goes stale exactly as it did live.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path

from minutiae.backtest import read as files
from minutiae.controller.record import RECORD_HEARTBEAT_S
from minutiae.controller.state import Report
from minutiae.controller.wire import report_from_json
from minutiae.errors import DataError, MinutiaeError, ParseError
from minutiae.model import Finding
from minutiae.node.replay import (
    TimedFinding,
    count_signals,
    drains_somewhere,
    ib_signals,
    log_signals,
)
from minutiae.node.result import status_of
from minutiae.scoring.damage import Damage, Harm, unknown_from
from minutiae.scoring.truth import TruthEvent, parse_truth_lines

DOMAIN_COLUMNS = ("rack", "leaf", "nvl_domain")
#: below this many nodes a dataset is read in-process (worker start-up would cost more)
PARALLEL_MIN_NODES = 128


class EventKind(Enum):
    REPORT = "report"
    DOWN = "down"
    UP = "up"
    JOBS = "jobs"


@dataclass(frozen=True, slots=True)
class NodeEvent:
    time: float
    node: str
    kind: EventKind
    report: Report | None = None
    jobs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Window:
    """A planned maintenance window from maintenance.csv (``end`` = time + the window length)."""

    node: str
    start: float
    end: float
    what: str


@dataclass(frozen=True, slots=True)
class History:
    """Everything a replay needs (see the module docstring). ``suppressed``: findings needing
    reset_gpu or more that fell inside planned maintenance windows and were not replayed."""

    source: str
    layout: str
    start: float
    end: float
    nodes: tuple[str, ...]
    domains: Mapping[str, Mapping[str, str]]
    events: tuple[NodeEvent, ...]
    maintenance: tuple[Window, ...] = ()
    truth: tuple[TruthEvent, ...] = ()
    gpus_per_node: int = 8
    suppressed: int = 0
    honour_maintenance: bool = True
    #: damaged inputs and the node-windows they make UNKNOWN (``minutiae.scoring.damage``)
    damage: tuple[Damage, ...] = ()


def _windows(rows: Sequence[Mapping[str, str]], length: float, where: str) -> list[Window]:
    out = []
    for i, r in enumerate(rows, 2):
        try:
            t = float(r["time"])
        except (TypeError, ValueError):
            raise DataError(f"line {i}: time {r.get('time')!r} is not a number", where) from None
        out.append(Window(str(r["node"]), t, t + length, str(r.get("what") or "")))
    return out


def _jobs(rows: Sequence[Mapping[str, str]], where: str) -> list[NodeEvent]:
    """JOBS events: the tuple of running job ids per node at each job start/end."""
    changes: dict[str, list[tuple[float, int, str]]] = {}
    for i, r in enumerate(rows, 2):
        try:
            s, e = float(r["start"]), float(r["end"])
        except (TypeError, ValueError):
            raise DataError(f"line {i}: start/end are not numbers", where) from None
        for n in (r.get("nodes") or "").split():
            changes.setdefault(n, []).extend([(s, 1, r["job_id"]), (e, -1, r["job_id"])])
    out: list[NodeEvent] = []
    for node, ch in changes.items():
        running: list[str] = []
        for t, d, job in sorted(ch, key=lambda x: (x[0], x[1])):
            if d > 0:
                running.append(job)
            elif job in running:
                running.remove(job)
            out.append(NodeEvent(t, node, EventKind.JOBS, jobs=tuple(running)))
    return out


@dataclass
class _Active:
    """What a node reports at a moment of its replay: its kernel-log findings since boot, its
    latest IB and log-count findings; ``suppressed``: drain-worthy ones inside maintenance."""

    log: dict[tuple[str, int | None, str | None], Finding] = field(default_factory=dict)
    ib: tuple[Finding, ...] = ()
    last_ib: tuple[Finding, ...] = ()
    counts: tuple[Finding, ...] = ()
    suppressed: int = 0

    def apply(self, what: int, payload: object, inside: bool) -> bool:
        """One moment (0 start, 1 boot, 2 log finding, 3 IB findings, 4 a window ends, 5 count
        findings); False when it falls inside a maintenance window (nothing is reported)."""
        if what == 1:
            self.log.clear()
        elif what == 2:
            assert isinstance(payload, TimedFinding)
            if inside:
                self.suppressed += drains_somewhere([payload.finding])
                return False
            self.log[payload.key] = payload.finding
        elif what == 3:
            assert isinstance(payload, tuple)
            self.last_ib = payload
            if inside:
                self.suppressed += drains_somewhere(payload)
                return False
            self.ib = payload
        elif what == 4:
            self.ib = self.last_ib
        elif what == 5:
            assert isinstance(payload, tuple)
            if inside:
                self.suppressed += drains_somewhere(payload)
                return False
            self.counts = payload
        return not inside

    def current(self) -> tuple[Finding, ...]:
        return (*self.log.values(), *self.ib, *self.counts)


def _node_reports(node: str, logs: list[TimedFinding], boots: list[float],
                  ib: list[tuple[float, tuple[Finding, ...]]], windows: list[Window],
                  start: float, end: float, honour: bool,
                  counts: Sequence[tuple[float, tuple[Finding, ...]]] = ()
                  ) -> tuple[list[NodeEvent], int]:
    """REPORT events of one node whenever its active finding set changes (and DOWN/UP)."""
    win = [(w.start, w.end) for w in windows] if honour else []
    moments: list[tuple[float, int, object]] = [(start, 0, None)]
    moments += [(b, 1, None) for b in boots]
    moments += [(tf.time, 2, tf) for tf in logs]
    moments += [(t, 3, fs) for t, fs in ib]
    moments += [(e, 4, None) for _s, e in win]  # re-evaluate when a window ends
    moments += [(t, 5, fs) for t, fs in counts]
    moments.sort(key=lambda m: (m[0], m[1]))
    active = _Active()
    states: list[tuple[float, tuple[Finding, ...]]] = []
    prev_keys: object = None
    for t, what, payload in moments:
        if t > end:
            break
        if not active.apply(what, payload, any(s <= t < e for s, e in win)):
            continue
        cur = active.current()
        keys = tuple(sorted((f.kind, f.code, f.pci or f.component or "", f.rule or "") for f in cur))
        if keys != prev_keys:
            prev_keys = keys
            states.append((max(t, start), cur))
    return _report_events(node, states, win, end), active.suppressed


def _report_events(node: str, states: list[tuple[float, tuple[Finding, ...]]],
                   win: list[tuple[float, float]], end: float) -> list[NodeEvent]:
    """Each state as a report stamped with the end of the interval it covers (the agent kept
    reporting); a maintenance window cuts the interval: the node is silent (stale) inside it."""
    events: list[NodeEvent] = []
    cuts = sorted(s for s, _e in win)
    for i, (t, fs) in enumerate(states):
        nxt = states[i + 1][0] if i + 1 < len(states) else end
        j = bisect.bisect_right(cuts, t)
        if j < len(cuts) and cuts[j] < nxt:
            nxt = cuts[j]
        events.append(NodeEvent(t, node, EventKind.REPORT,
                                Report(node, max(nxt, t), status_of(fs), fs)))
    for s, e in win:
        events.append(NodeEvent(s, node, EventKind.DOWN))
        events.append(NodeEvent(e, node, EventKind.UP))
    return events


def _load_node(task: tuple[Path, str, tuple[Window, ...], float, float, int, bool, float | None,
                             tuple[Damage, ...]]
               ) -> tuple[list[NodeEvent], int, list[Damage]]:
    """One node's events and damage (module level: it runs in worker processes with ``jobs`` > 1).

    From the first damage on (its own files, or a fleet-wide file) the node is UNKNOWN: its last
    report before is held to that moment and nothing after it is replayed, so reconcile sees a
    silent node (neither healthy nor drained); damaged from the start, it never reports."""
    root, node, own, start, end, year, honour, ib_interval, fleet_damage = task
    kern, ib_text, damage = files.read_node(root, node, start=start, end=end, year=year,
                                            ib_interval_s=ib_interval)
    cut = unknown_from((*fleet_damage, *damage), node)
    if cut is not None and cut <= start:
        events, sup = _node_reports(node, [], [], [], list(own), start, start, honour)
        return [e for e in events if e.kind is not EventKind.REPORT], sup, damage
    stop = end if cut is None else min(end, cut)
    logs, boots = log_signals(kern, year) if kern else ([], [])
    ib = ib_signals(ib_text, str(root / "nodes" / node / "ib.csv"), node, boots) if ib_text else []
    counted = count_signals([tf for tf in logs if not (honour and any(
        w.start <= tf.time < w.end for w in own))], boots, node)
    events, sup = _node_reports(node, logs, boots, ib, list(own), start, stop, honour, counted)
    return events, sup, damage


def _check_damage(root: Path, damage: Sequence[Damage], allow: bool) -> None:
    """A damaged file the whole replay depends on: refused (exit 3) unless allowed."""
    for d in damage:
        if d.fatal and not allow:
            line = f"line {d.line}: " if d.line is not None else ""
            raise DataError(f"{line}{d.detail or d.harm.value} ({d.harm.value}); the whole replay "
                            "depends on it (--allow-damaged replays the nodes it affects as "
                            "UNKNOWN)", str(root / d.path))


def load_simulated(root: Path, *, maintenance_window_s: float = 1800.0,
                   honour_maintenance: bool = True, jobs: int = 1,
                   allow_damaged: bool = False) -> History:
    """A simulated dataset; ``jobs`` > 1 rebuilds the nodes' reports in that many processes.
    Damaged files (``History.damage``) make node-windows UNKNOWN; a damaged fleet-wide file
    raises ``DataError`` unless ``allow_damaged``."""
    meta = files.read_meta(root)
    try:
        start, end = float(meta["start"]), float(meta["end"])
    except (KeyError, TypeError, ValueError):
        raise DataError("needs numeric start and end", str(root / "meta.json")) from None
    year = datetime.fromtimestamp(start, UTC).year
    ff = files.scan_fleet(root, meta, start)
    _check_damage(root, ff.damage, allow_damaged)
    domains = {r["node"]: {c: r[c] for c in DOMAIN_COLUMNS if r.get(c)} for r in ff.fleet}
    nodes = ff.nodes
    windows = _windows(ff.maintenance, maintenance_window_s, str(root / "maintenance.csv"))
    by_node: dict[str, list[Window]] = {}
    for w in windows:
        by_node.setdefault(w.node, []).append(w)
    events: list[NodeEvent] = []
    suppressed = 0
    sampling = meta.get("sampling")
    ib_interval = sampling.get("ib_interval_s") if isinstance(sampling, dict) else None
    ib_interval = float(ib_interval) if isinstance(ib_interval, int | float) else None
    tasks = [(root, node, tuple(by_node.get(node, ())), start, end, year, honour_maintenance,
              ib_interval, tuple(ff.damage)) for node in nodes]
    if jobs > 1 and len(nodes) >= PARALLEL_MIN_NODES:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # forkserver: clean workers, never a fork of a process that runs threads
        ctx = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            results = list(pool.map(_load_node, tasks, chunksize=max(1, len(tasks) // (4 * jobs))))
    else:
        results = [_load_node(t) for t in tasks]
    damage = list(ff.damage)
    for evs, sup, dmg in results:
        events.extend(evs)
        suppressed += sup
        damage.extend(dmg)
    events.extend(_jobs(ff.jobs, str(root / "jobs.csv")))
    truth_path = root / "truth.jsonl"
    truth = tuple(parse_truth_lines(files.read_lines(truth_path), str(truth_path)))
    events.sort(key=lambda e: (e.time, e.node, e.kind.value))
    return History(str(root), files.SIMULATED, start, end, tuple(nodes), domains, tuple(events),
                   tuple(windows), truth, int(meta.get("gpus_per_node", 8)), suppressed,
                   honour_maintenance, tuple(damage))


def load_recorded(root: Path, *, maintenance_window_s: float = 1800.0,
                  honour_maintenance: bool = True, allow_damaged: bool = False) -> History:
    """A recorded history. A line of reports.jsonl that is not JSON, or a damaged fleet.csv,
    maintenance.csv or jobs.csv, is refused unless ``allow_damaged`` (then the replay stops at
    it); a node fleet.csv lists that never reports is UNKNOWN (silent) throughout."""
    events: list[NodeEvent] = []
    domains: dict[str, dict[str, str]] = {}
    where = str(root / "reports.jsonl")
    docs, cut = files.read_reports(root)
    for line, doc in docs:
        if not isinstance(doc, dict) or not isinstance(doc.get("time"), int | float):
            raise DataError(f"line {line}: a report needs a numeric time", where)
        try:
            rep, dom = report_from_json(doc, float(doc["time"]))
        except MinutiaeError as exc:
            raise DataError(f"line {line}: {exc}", where) from None
        events.append(NodeEvent(rep.time, rep.node, EventKind.REPORT, rep))
        if dom:
            domains.setdefault(rep.node, {}).update(dom)
    if cut is not None and not allow_damaged:
        raise ParseError(f"line {cut.line}: {cut.detail}; --allow-damaged replays up to it", where)
    if not events:
        raise DataError("no reports", where)
    fleet, d1 = files.recorded_csv(root, "fleet.csv", ("node",), None)
    maint, d2 = files.recorded_csv(root, "maintenance.csv", ("time", "node"), "time")
    job_rows, d3 = files.recorded_csv(root, "jobs.csv", ("job_id", "start", "end", "nodes"), "start")
    damage = [d for d in (cut, d1, d2, d3) if d is not None]
    _check_damage(root, damage, allow_damaged)
    for r in fleet:
        domains.setdefault(r["node"], {}).update({c: r[c] for c in DOMAIN_COLUMNS if r.get(c)})
    windows = _windows(maint, maintenance_window_s, str(root / "maintenance.csv"))
    if honour_maintenance:  # the reports themselves are what was recorded: only the scheduler view
        for w in windows:
            events += [NodeEvent(w.start, w.node, EventKind.DOWN),
                       NodeEvent(w.end, w.node, EventKind.UP)]
    events.extend(_jobs(job_rows, str(root / "jobs.csv")))
    events.sort(key=lambda e: (e.time, e.node, e.kind.value))
    nodes = tuple(sorted({e.node for e in events} | set(domains)))
    start = min(e.time for e in events)
    reported = {e.node for e in events if e.kind is EventKind.REPORT}
    damage += [Damage("reports.jsonl", Harm.MISSING, start, n, detail="listed in fleet.csv, never reports")
               for n in nodes if n not in reported]
    # the recorder writes every node at least once a minute while it runs, so the last report
    # still held for a minute after the last line
    end = max(e.time for e in events) + RECORD_HEARTBEAT_S
    return History(str(root), files.RECORDED, start, end, nodes, domains, tuple(events),
                   tuple(windows), honour_maintenance=honour_maintenance, damage=tuple(damage))


def load_history(root: str | Path, *, maintenance_window_s: float = 1800.0,
                 honour_maintenance: bool = True, jobs: int = 1, allow_damaged: bool = False) -> History:
    """Load ``root`` as whichever history it holds (simulated dataset or recorded reports)."""
    p = Path(root)
    if files.layout(p) == files.SIMULATED:
        return load_simulated(p, maintenance_window_s=maintenance_window_s,
                              honour_maintenance=honour_maintenance, jobs=jobs,
                              allow_damaged=allow_damaged)
    return load_recorded(p, maintenance_window_s=maintenance_window_s,
                         honour_maintenance=honour_maintenance, allow_damaged=allow_damaged)

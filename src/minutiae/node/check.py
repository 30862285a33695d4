"""One health check of one node: ``run_check(cfg, clock) -> NodeReport`` (stable API).

Called once by ``minutiae check`` (Slurm HealthCheckProgram) and every few seconds by the agent.
The check is a loop over the registered node sources (node/sources/registry.py): each check
group (``gpu``, ``ib``, ``pcie``, ``kernel_log``) becomes one ``CheckResult`` from its sources'
snapshots, judged by the counter rules, or from the finished result a source hands back (the
kernel log judges its own lines; a source that cannot be read makes its check UNKNOWN with the
reason, never OK, and the others still run). Node facts (the uptime, ``node.uptime_s``: the boot
grace of ``ib.port-down``) are fed to the counter rules; an unreadable uptime is a note.

What a cycle remembers for the next one (previous counter values for rates, the kernel-log
cursor and its faults since boot, log-count engine state) is a ``CheckMemory``: kept in
``state_file`` (one-shot runs), or passed as ``memory`` by a long-running caller.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from minutiae.clock import Clock
from minutiae.errors import InputError, MinutiaeError
from minutiae.model import Action, CheckResult, Finding, Observation, Severity, Status
from minutiae.model.findings import Scalar
from minutiae.model.snapshot import DERIVED_METRICS, Snapshot
from minutiae.node.config import CheckConfig, parse_checks
from minutiae.node.memory import CheckMemory
from minutiae.node.result import _result, reason_for, status_of
from minutiae.node.sources.base import NodeSource, Reading, Request
from minutiae.node.sources.ib.parse_sysfs import NODE_COMPONENT as IB_NODE
from minutiae.node.sources.registry import GROUPS, REGISTRY
from minutiae.rules.counters.load import counter_rules
from minutiae.rules.counters.model import UPTIME, baseline_metrics, context, judge

#: how long a counter value not seen again stays the baseline for rates (a source down, a port gone)
COUNTER_TTL_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class NodeReport:
    """The health of one node at ``time``.

    ``status`` is the worst check status (CRITICAL > UNKNOWN > WARNING > OK: a known critical
    outranks "could not tell"); ``action`` is the largest action any finding needs (``none`` …
    ``inspect``); ``drain`` is true when that action is ``reset_gpu`` or more. ``observations``
    are the raw values (for the agent's metrics); ``notes`` are non-fatal remarks (state file,
    uptime). ``uptime_s`` is the node's seconds since boot the counter rules saw (None: not
    read, or unreadable — then no rule had a boot grace).
    """

    node: str
    time: float
    results: tuple[CheckResult, ...]
    observations: tuple[Observation, ...] = ()
    notes: tuple[str, ...] = ()
    uptime_s: float | None = None

    @property
    def status(self) -> Status:
        return Status.worst([r.status for r in self.results])

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for r in self.results for f in r.findings)

    @property
    def action(self) -> Action:
        return max((f.action for f in self.findings), default=Action.NONE)

    @property
    def drain(self) -> bool:
        return self.action.drains

    def result(self, check: str) -> CheckResult | None:
        return next((r for r in self.results if r.check == check), None)

    def reason(self) -> str | None:
        """A short reason for a scheduler: the distinct messages of the findings that need the
        node's action, worst first, e.g. ``Xid 79 (…FALLEN_OFF_THE_BUS) on GPU 0000:44:00.0``."""
        return reason_for(self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "time": self.time,
            "status": self.status.label,
            "exit_code": int(self.status),
            "action": self.action.label,
            "drain": self.drain,
            "reason": self.reason(),
            "checks": [r.to_json() for r in self.results],
            "notes": list(self.notes),
            "uptime_s": self.uptime_s,
        }


@dataclass
class _Group:
    """One check group's readings in this cycle: its merged snapshot, or a finished result."""

    snapshot: Snapshot | None = None
    result: CheckResult | None = None


@dataclass
class _Cycle:
    """What the sources delivered in one cycle."""

    groups: dict[str, _Group] = field(default_factory=dict)
    facts: dict[str, Scalar] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def run_check(cfg: CheckConfig, clock: Clock, *, memory: CheckMemory | None = None) -> NodeReport:
    """Run every configured check once. Never raises for a source problem: that source's check
    is UNKNOWN with the reason. ``memory`` carries counter values, the kernel-log cursor and
    the kernel-log findings between calls in-process (it is updated); without it,
    ``cfg.state_file`` (if any) is read before and written after the run."""
    from minutiae.node.memory_file import load_state, save_state

    now = clock.now()
    notes: list[str] = []
    mem = memory
    if mem is None:
        mem = CheckMemory()
        if cfg.state_file is not None:
            try:
                mem = load_state(cfg.state_file)
            except InputError as exc:
                notes.append(str(exc))
    node = cfg.node or os.uname().nodename.split(".")[0]
    # parsed rule catalogs are cached beside the state file (one-shot runs start faster)
    cache_dir = cfg.state_file.parent if cfg.state_file is not None else None
    cycle = read_sources(REGISTRY, Request(cfg, now, clock, mem, node, cache_dir))
    notes.extend(cycle.notes)
    all_obs = [o for g in cycle.groups.values() if g.snapshot is not None for o in g.snapshot.observations]
    uptime = cycle.facts.get(UPTIME)
    extra: dict[str, dict[str, Scalar]] = {
        "node": {"expected_gpus": cfg.expected_gpus, "expected_driver": cfg.expected_driver,
                 **cycle.facts},
        # beside the IB sources' port counts: ib.port-count-expected compares the two
        IB_NODE: {"expected_ib_ports": cfg.expected_ib_ports},
    }
    by_check, pending = counter_findings(all_obs, mem, now, extra, node, cache_dir)
    notes.extend(pending)
    results = [g.result if g.result is not None else _judged(name, g.snapshot, by_check)
               for name, g in cycle.groups.items()]
    _keep_baselines(mem, all_obs, now, cache_dir)
    if memory is None and cfg.state_file is not None:
        try:
            save_state(cfg.state_file, mem, now)
        except InputError as exc:
            notes.append(str(exc))
    return NodeReport(node, now, tuple(results), tuple(all_obs), tuple(notes),
                      float(uptime) if isinstance(uptime, int | float) else None)


def read_sources(sources: Sequence[NodeSource], req: Request) -> _Cycle:
    """Every source of the configured groups (and every node-fact source), in order: a group's
    snapshots are merged; a source handing back a result ends its group; a fallback source runs
    only when its group has no snapshot yet."""
    cycle = _Cycle()
    for src in sources:
        if src.group is not None and src.group not in req.cfg.checks:
            continue
        g = cycle.groups.get(src.group) if src.group is not None else None
        if g is not None and (g.result is not None or (src.fallback and g.snapshot is not None)):
            continue
        reading = src.read(Request(req.cfg, req.now, req.clock, req.memory, req.node,
                                   req.cache_dir, g.snapshot if g is not None else None))
        if reading is None:
            continue
        cycle.notes.extend(reading.notes)
        cycle.facts.update(reading.facts)
        if src.group is not None:
            _add(cycle.groups.setdefault(src.group, _Group()), reading, req.now)
    return cycle


def _add(g: _Group, reading: Reading, now: float) -> None:
    if reading.result is not None:
        g.result, g.snapshot = reading.result, None
    elif reading.snapshot is not None:
        snap = _stamped(reading.snapshot, now)
        g.snapshot = snap if g.snapshot is None else g.snapshot.merged(snap)


def _stamped(snap: Snapshot, now: float) -> Snapshot:
    """Observations without a time get this cycle's."""
    obs = tuple(o if o.time is not None else Observation(o.source, o.component, o.metric, o.value, now)
                for o in snap.observations)
    return Snapshot(snap.source, obs, snap.problems)


def _judged(name: str, snap: Snapshot | None, by_check: Mapping[str, list[Finding]]) -> CheckResult:
    obs = snap.observations if snap is not None else ()
    problems = [str(p) for p in snap.problems] if snap is not None else []
    read = sum(1 for o in obs if o.metric not in DERIVED_METRICS)
    return _result(name, by_check.get(name, []), problems, read)


#: which check reports a counter rule's findings, by the component prefix: what the sources say
_CHECK_OF_COMPONENT = {c: s.group for s in REGISTRY if s.group is not None for c in s.components}


def counter_findings(
    observations: Sequence[Observation],
    memory: CheckMemory,
    now: float,
    extra: Mapping[str, Mapping[str, Scalar]],
    node: str = "localhost",
    cache_dir: Path | None = None,
) -> tuple[dict[str, list[Finding]], list[str]]:
    """Counter-rule findings grouped by check name, and notes (gated rules whose condition
    holds but has not held long enough yet). Rules with a gate (persistence, healthy delay,
    flapping) go through the check engine, their state kept in ``memory.gates``."""
    rules = counter_rules(cache_dir)
    verdicts = judge(rules, context(observations, memory.counters, now, extra))
    found = [v.finding() for v in verdicts if v.holds and v.rule.gate is None]
    notes: list[str] = []
    if any(r.gate is not None for r in rules):
        from minutiae.rules.counters.gate import gated_findings
        from minutiae.rules.engine.state import EngineState

        state = None
        if memory.gates:
            try:
                state = EngineState.from_dict(memory.gates)
            except MinutiaeError:
                notes.append("counter-rule timers were damaged in the state file; they start again")
        out = gated_findings(rules, verdicts, now, state, node)
        found.extend(out.findings)
        found.extend(_pending_faults(verdicts, out.findings))
        notes.extend(out.pending)
        memory.gates = out.state.to_dict() if any(out.state.rules.values()) else None
    by_check: dict[str, list[Finding]] = {}
    for f in found:
        prefix = (f.component or "node").split(":", 1)[0]
        by_check.setdefault(_CHECK_OF_COMPONENT.get(prefix, prefix), []).append(f)
    return by_check, notes


def _pending_faults(verdicts: Sequence[Any], alarmed: Sequence[Finding]) -> list[Finding]:
    """A gated error/critical condition that holds but has not held long enough (a port down
    for less than its 120 s) is a WARNING now, not OK (docs/check.md): its check says something
    is wrong while the timer runs; the rule's own severity and action come once it alarms."""
    done = {(f.rule, f.component) for f in alarmed}
    out: list[Finding] = []
    for v in verdicts:
        r = v.rule
        if (v.holds and r.gate is not None and not r.gate.flap and r.severity >= Severity.ERROR
                and (r.id, v.component) not in done):
            f = v.finding()
            out.append(replace(f, severity=Severity.WARNING, action=Action.NONE,
                               message=f"pending ({r.gate.for_s:.0f} s to alarm): {f.message}",
                               attrs={**f.attrs, "pending": True}))
    return out


def _keep_baselines(mem: CheckMemory, all_obs: Sequence[Observation], now: float,
                    cache_dir: Path | None) -> None:
    """Values a failed source did not deliver this cycle stay as the baseline for a while, so a
    transient UNKNOWN does not cost the next cycle its rates; only the metrics that rates and
    increases read are kept (a tenth of the values: the state file stays small)."""
    keep = baseline_metrics(counter_rules(cache_dir))
    fresh = {(o.component, o.metric): (float(o.value), now) for o in all_obs
             if o.metric in keep and isinstance(o.value, int | float) and not isinstance(o.value, bool)}
    kept = {k: v for k, v in mem.counters.items()
            if k[1] in keep and k not in fresh and now - v[1] <= COUNTER_TTL_S}
    mem.counters = {**kept, **fresh}


__all__ = ["GROUPS", "CheckConfig", "CheckMemory", "NodeReport", "counter_findings", "parse_checks",
           "read_sources", "reason_for", "run_check", "status_of"]

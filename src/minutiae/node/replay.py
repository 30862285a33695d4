"""What the agent would have reported, rebuilt from a simulated node's files (pure).

- kern.log → events with the shipped kernel-log rules (plus one boot rule, ``Linux version``)
  → findings with the node checks' own mapping (``checks.logrules``: rule severity/action, the
  XID/SXID catalogs, Xid 45 following the previous Xid). A kernel-log finding stays in the node's reports until the node boots again
  (the agent reads the kernel log since boot; events are not conditions, the reboot is what
  ends them). Repeats of the same (kind, code, device) keep one finding, the latest.
- the log-count engine rules (``log_counts.toml``: a rule repeating within a window, flapping
  links) over those findings, with the engine's own state since boot, as the agent runs them;
- ib.csv (a change log of sysfs counters and port state) → the sysfs-IB parser's observations
  at every sample time → the shipped counter rules for ``ib`` components (with the previous
  sample for rates and increases), exactly as the agent evaluates them.
"""

from __future__ import annotations

import csv
import io
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from minutiae.clock import ManualClock
from minutiae.errors import DataError, ParseError
from minutiae.model import Action, Finding, Severity
from minutiae.model.snapshot import SnapshotBuilder
from minutiae.node.sources.ib.parse_sysfs import ib_component, parse_ib_port
from minutiae.node.sources.kernel_log.parse import KernelLogParser
from minutiae.rules.counters.gate import GateReplay
from minutiae.rules.counters.load import counter_rules
from minutiae.rules.counters.model import (
    UPTIME,
    Context,
    CounterRule,
    boot_grace_s,
    evaluate,
    judge,
)
from minutiae.rules.engine.engine import Engine
from minutiae.rules.engine.rules import EngineRule, shipped_engine_rules
from minutiae.rules.log_findings import LogFindingMapper
from minutiae.rules.logs import LogRule, kernel_log_rules

BOOT_RULE = LogRule(id="backtest-boot", kind="boot", keywords=("Linux version",),
                    pattern=re.compile(r"^Linux version \S+"), severity=Severity.INFO,
                    action=Action.NONE, message="boot",
                    description="a kernel boot: kernel-log findings end here")


@dataclass(frozen=True, slots=True)
class TimedFinding:
    time: float
    finding: Finding

    @property
    def key(self) -> tuple[str, int | None, str | None]:
        f = self.finding
        return (f.kind, f.code, f.pci or f.component)


@cache
def _parser(year: int | None) -> KernelLogParser:
    return KernelLogParser((*kernel_log_rules(), BOOT_RULE), year=year)


@dataclass(frozen=True, slots=True)
class LogSeries:
    """One kernel log, replayed: its findings with times, its boot times, and how many
    findings had no wall-clock time (raw dmesg uptimes: they cannot be placed)."""

    findings: tuple[TimedFinding, ...]
    boots: tuple[float, ...]
    untimed: int = 0


def log_series(data: bytes, year: int | None) -> LogSeries:
    """What the agent's kernel-log check finds in ``data``, line by line, with the node checks'
    own mapping (catalogs, Xid 45 follows the previous Xid …)."""
    findings: list[TimedFinding] = []
    boots: list[float] = []
    untimed = 0
    mapper = LogFindingMapper()
    for ev in _parser(year).parse_chunks([data]):
        if ev.time is None:
            untimed += ev.kind != "boot"
            continue
        t = ev.time.timestamp()
        if ev.kind == "boot":
            boots.append(t)
        else:
            findings.append(TimedFinding(t, mapper.finding(ev)))
    return LogSeries(tuple(findings), tuple(boots), untimed)


def log_signals(data: bytes, year: int | None) -> tuple[list[TimedFinding], list[float]]:
    """``(findings with times, boot times)`` of one kernel log (:func:`log_series`)."""
    series = log_series(data, year)
    return list(series.findings), list(series.boots)


@cache
def count_rules() -> tuple[EngineRule, ...]:
    """The agent's log-count engine rules (``log_counts.toml``: repeats within a window, flapping)."""
    return tuple(r for r in shipped_engine_rules() if r.on == "finding")


def count_signals(findings: Sequence[TimedFinding], boots: Sequence[float], node: str
                  ) -> list[tuple[float, tuple[Finding, ...]]]:
    """``(time, alarmed count findings)`` whenever they may change: the agent runs the log-count
    engine over its kernel-log findings (state since boot); here the engine is evaluated at
    every finding and at every moment a rule's window, persistence or clear delay can end."""
    rules = count_rules()
    if not findings or not rules:
        return []
    moments: set[float] = set(boots)
    for tf in findings:
        moments.add(tf.time)
        for r in rules:
            moments.update((tf.time + r.for_s, tf.time + r.window_s + 1.0,
                            tf.time + r.window_s + r.clear_after_s + 1.0))
    order = sorted(findings, key=lambda tf: tf.time)
    boot_list = sorted(boots)
    clock = ManualClock(min(moments))
    engine: Engine | None = None
    boot_at: float | None = None
    i = 0
    out: list[tuple[float, tuple[Finding, ...]]] = []
    last: tuple[tuple[str, str], ...] = ()
    for t in sorted(moments):
        clock.advance(t - clock.now())
        b = max((x for x in boot_list if x <= t), default=None)
        if engine is None or b != boot_at:  # a new boot: counts are since boot
            engine, boot_at = Engine(rules, clock=clock, node=node, boot_time=b), b
        new = []
        while i < len(order) and order[i].time <= t:
            if b is None or order[i].time >= b:
                new.append(order[i].finding)
            i += 1
        if new:
            engine.record(new)
        got = engine.evaluate().findings
        keys = tuple(sorted((f.rule or f.kind, f.component or f.pci or "") for f in got))
        if keys != last or new:
            out.append((t, got))
            last = keys
    return out


@cache
def ib_rules() -> tuple[CounterRule, ...]:
    return tuple(r for r in counter_rules() if r.component == "ib")


RATE_OPS = frozenset({"increase", "rate_per_hour"})


def _samples(rows: Sequence[dict[str, str]]) -> Iterator[tuple[float, dict[tuple[str, str], dict[str, str]]]]:
    """``(time, {(device, port): changed files})`` per sample time of the change log."""
    changed: dict[tuple[str, str], dict[str, str]] = {}
    cur: float | None = None
    for r in rows:
        try:
            t = float(r["time"])
        except (TypeError, ValueError):
            continue
        if cur is not None and t != cur:
            yield cur, changed
            changed = {}
        cur = t
        counter = r.get("counter") or ""
        rel = counter if counter in ("state", "phys_state", "rate", "link_layer") else f"counters/{counter}"
        changed.setdefault((r.get("device") or "?", r.get("port") or "1"), {})[rel] = r.get("value") or ""
    if cur is not None:
        yield cur, changed


class _Previous(Mapping[tuple[str, str], tuple[float, float]]):
    """The previous sample's numeric values, as the counter rules read them."""

    def __init__(self, values: dict[str, dict[str, Any]], t: float) -> None:
        self._values = values
        self._t = t

    def __getitem__(self, key: tuple[str, str]) -> tuple[float, float]:
        v = self._values.get(key[0], {}).get(key[1])
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise KeyError(key)
        return float(v), self._t

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter([(c, m) for c, vals in self._values.items() for m in vals])

    def __len__(self) -> int:
        return sum(len(v) for v in self._values.values())


class GateSeries:
    """The gated counter rules (``for_s``, ``clear_after_s``, ``type = "flap"``) over a recorded
    series, judged as the agent's engine judges them (``rules.counters.gate.GateReplay``, state
    carried), and the re-check times at which a verdict can change without a new sample (a
    persistence, a window or a healthy delay ending). The backtest's and the sim eval's replays
    (kernel log aside: ``count_signals``) all drive the gates through this."""

    def __init__(self, rules: Sequence[CounterRule], node: str, end: float) -> None:
        self.rules = tuple(r for r in rules if r.gate is not None)
        self._gates = GateReplay(self.rules, node, end=end)
        #: re-check times still to come, sorted, each once
        self.ticks: list[float] = []

    def judge(self, values: Mapping[str, Mapping[str, Any]], previous: Mapping[tuple[str, str], tuple[float, float]],
              t: float, changed: bool) -> tuple[list[Finding], list[float]]:
        """The gated rules' alarms at ``t`` and the re-check times this adds (``changed``: a new
        sample, not a re-check)."""
        return self._gates.check(judge(self.rules, Context(values, previous, t)), t, changed)

    def check(self, values: Mapping[str, Mapping[str, Any]], previous: Mapping[tuple[str, str], tuple[float, float]],
              t: float, changed: bool) -> list[Finding]:
        """``judge``, its re-check times kept in ``ticks``."""
        found, again = self.judge(values, previous, t, changed)
        self.ticks = sorted({*self.ticks, *again})
        return found

    def next_tick(self) -> float | None:
        return self.ticks[0] if self.ticks else None

    def due(self, t: float) -> bool:
        """Whether a re-check falls due by ``t`` (those are used up)."""
        hit = False
        while self.ticks and self.ticks[0] <= t:
            self.ticks.pop(0)
            hit = True
        return hit


#: the agent re-checks this soon: a rate that was high at a change sample is judged again
RECHECK_S = 60.0


def ib_signals(text: str, where: str, node: str = "localhost", boots: Sequence[float] = ()
               ) -> list[tuple[float, tuple[Finding, ...]]]:
    """``(time, findings at that time)`` at every sample of an ib.csv change log, and at the
    re-checks that can change a verdict without a new sample.

    The agent re-reads every port every 10 s; here a port is re-parsed when its files changed
    and re-judged when it changed or had findings (an unchanged port without findings cannot
    start one: thresholds see the same values, rates and increases see 0). A re-check
    ``RECHECK_S`` after a sample with a rate or increase finding lets it end as it would at the
    agent's next check. Group rules (a port slower than its HCA-type peers) see every port.
    Gated rules (``for_s``, ``clear_after_s``, flapping) go through the engine exactly as in the
    agent (``counter_gate.gated_findings``, state carried), judged at every sample and at the
    moments their persistence, window or healthy delay can end. ``boots`` (times, from the
    kernel log) give the rules ``node.uptime_s``; every port is judged again when a rule's boot
    grace ends (a port still down then has no new sample)."""
    rows = parse_csv(text, where, ("time", "device", "port", "counter", "value"))
    rows.sort(key=lambda r: float(r["time"]) if _num(r["time"]) else 0.0)
    samples = list(_samples(rows))
    last = max((float(r["time"]) for r in rows if _num(r["time"])), default=0.0)
    replay = _IbReplay(where, node, sorted(boots), last, [st for st, _ in samples])
    out: list[tuple[float, tuple[Finding, ...]]] = []
    changed: dict[tuple[str, str], dict[str, str]]
    i = 0
    while i < len(samples) or replay.ticks:
        replay.ticks.sort()
        if replay.ticks and (i >= len(samples) or replay.ticks[0] < samples[i][0]):
            t, changed = replay.ticks.pop(0), {}
        else:
            t, changed = samples[i]
            i += 1
            replay.ticks = [x for x in replay.ticks if x != t]
        out.append((t, replay.step(t, changed)))
    return out


class _IbReplay:
    """The state of one ib.csv replay between samples (see ``ib_signals``)."""

    def __init__(self, where: str, node: str, boots: list[float], last: float,
                 times: list[float]) -> None:
        rules = ib_rules()
        plain = tuple(r for r in rules if r.gate is None)
        self.where = where
        self.nongroup = tuple(r for r in plain if r.cond.op != "below_group_max")
        self.group = tuple(r for r in plain if r.cond.op == "below_group_max")
        self.gated = tuple(r for r in rules if r.gate is not None)
        self.rates = {r.id for r in plain if r.cond.op in RATE_OPS}
        # the gates keep timing after the last row (a window, a healthy delay) for twice their
        # longest wait; not forever (an alarm that holds to the end re-checks while it lasts)
        waits = [w for r in self.gated if r.gate is not None
                 for w in (r.gate.for_s, r.gate.clear_after_s, r.gate.window_s)]
        self.gates = GateSeries(self.gated, node, end=last + 2 * max(waits, default=0.0) + 1.0)
        self.grouped = {m for r in self.group for m in (*r.cond.metrics, r.cond.group_by or "")}
        self.boots = boots
        grace = max((boot_grace_s(r) for r in rules), default=0.0)
        # the first sample at or after a boot grace ends judges every port (the values are the
        # sample's, a port still down then has no row of its own)
        self.graced = {times[k] for b in boots if grace > 0
                       for k in [bisect_left(times, b + grace)] if k < len(times)}
        self.values: dict[str, dict[str, Any]] = {}
        self.prev: dict[str, dict[str, Any]] = {}
        self.prev_t: float | None = None
        self.had: set[str] = set()
        self.group_found: list[Finding] = []
        self.ticks: list[float] = []

    def _parse(self, t: float, changed: Mapping[tuple[str, str], dict[str, str]]) -> tuple[set[str], bool]:
        """The changed ports' new values; which components changed and whether a value the
        group rules compare did."""
        comps: set[str] = set()
        regroup = False
        for (dev, port), f in changed.items():
            # the parser turns only the files that changed into values (the rest are kept);
            # its "missing file" problems for the unchanged ones are meaningless here
            b = SnapshotBuilder("sysfs-ib", t)
            parse_ib_port(b, dev, port, f, f"{self.where}:{dev}/{port}")
            comp = ib_component(dev, port)
            old = self.values.get(comp)
            new = {**(old or {}), **{o.metric: o.value for o in b.build()}}
            regroup = regroup or old is None or any(old.get(m) != new.get(m) for m in self.grouped)
            self.values[comp] = new
            comps.add(comp)
        return comps, regroup

    def step(self, t: float, changed: Mapping[tuple[str, str], dict[str, str]]) -> tuple[Finding, ...]:
        """The findings at ``t`` (a sample with its ``changed`` files, or a re-check: none)."""
        k = bisect_right(self.boots, t)
        node_vals = {"node": {UPTIME: t - self.boots[k - 1]}} if k else {}
        comps = set(self.values) if changed and t in self.graced else set()
        parsed, regroup = self._parse(t, changed)
        comps |= parsed
        previous = _Previous(self.prev, self.prev_t) if self.prev_t is not None else _Previous({}, t)
        # sorted: the same order in every process
        sub = {c: self.values[c] for c in sorted(comps | self.had) if c in self.values}
        sub.update(node_vals)
        if regroup:  # group rules compare ports: only a change of what they compare matters
            self.group_found = evaluate(self.group, Context({**self.values, **node_vals}, previous, t))
        found = evaluate(self.nongroup, Context(sub, previous, t)) + self.group_found
        if self.gated:  # the agent's engine over the gated rules' verdicts (shared with the sim eval)
            ordered = {**{c: self.values[c] for c in sorted(self.values)}, **node_vals}
            gate_found, again = self.gates.judge(ordered, previous, t, bool(changed))
            found += gate_found
            self.ticks += [x for x in again if x not in self.ticks]
        self.had = {f.component for f in found if f.component}
        if changed and any(f.rule in self.rates for f in found):
            self.ticks.append(t + RECHECK_S)
        for c in self.values:
            self.prev[c] = dict(self.values[c]) if c in comps or c not in self.prev else self.prev[c]
        if not changed:  # a re-check: the previous check is now, with the same values
            self.prev = {c: dict(v) for c, v in self.values.items()}
        self.prev_t = t
        return tuple(found)


def _num(s: str | None) -> bool:
    try:
        float(s or "")
    except ValueError:
        return False
    return True


def drains_somewhere(findings: Iterable[Finding]) -> int:
    """How many findings need a node-level remediation (reset_gpu or more)."""
    return sum(1 for f in findings if f.action.drains)


def parse_csv(text: str, where: str, required: tuple[str, ...]) -> list[dict[str, str]]:
    """Rows of a CSV text as dicts (a recorded series: ib.csv, fleet.csv …); ``DataError``
    names ``where`` when a required column is missing, ``ParseError`` when it is not CSV."""
    reader = csv.DictReader(io.StringIO(text))
    cols = reader.fieldnames or []
    missing = [c for c in required if c not in cols]
    if missing:
        raise DataError(f"missing column(s) {', '.join(missing)} (header: {','.join(cols)})", where)
    try:
        return [r for r in reader if r]
    except csv.Error as exc:
        raise ParseError(f"bad CSV: {exc}", where) from None

"""Counter rules: observations (NVML, nvidia-smi, DCGM, sysfs IB/PCIe) → findings (pure).

Rules are data: ``catalog/counters.toml`` (schema in docs/rules.md), validated at load, and every
rule's ``[[rule.example]]`` is run by the loader, so a catalog whose examples do not behave as
written does not load. A rule looks at one ``metric`` (or the sum of several) of every component
whose prefix is ``component`` (``gpu``, ``ib``, ``pcie``, ``node``) and fires when ``op`` holds:

======================  ===================================================================
op                      fires when
======================  ===================================================================
gt ge lt le eq ne       value <op> ``threshold`` (number, bool or string)
gt_metric lt_metric     value <op> (metric ``other`` of the same component + ``offset``)
ne_metric               value differs from metric ``other`` (both present; strings allowed)
increase                value − previous value > ``threshold`` (needs a previous run)
rate_per_hour           (value − previous) / hours since then > ``threshold``
below_group_max         value < the largest value among components with the same ``group_by``
bits_any                value (a bitmask) has any of ``bits`` (clock-event reason names) set
======================  ===================================================================

``unless`` (a table with metric/op/threshold/bits, or a list of them: any that holds) suppresses
a rule on components where it holds (e.g. a PCIe generation drop while the GPU is idle or in a
low performance state is power saving, not a fault). A metric written ``node.<name>`` is read
from the node's values, so ``unless = { metric = "node.uptime_s", op = "lt", threshold = 300 }``
is a boot grace (IB ports go DOWN → INIT → ACTIVE in a boot's first minutes); where the uptime
is not known the rule is not suppressed.
A counter that went down (reset, reboot, wrap) is a new baseline: rates/increases stay quiet.

This module says what holds *now* (``evaluate``: one finding per component where a rule's
condition holds; ``judge``: the verdict, true or false, on every component the rule applies
to). Time beyond "since the previous sample" is not known here: a rule with ``for_s``
(persistence), ``clear_after_s`` (healthy delay) or ``type = "flap"`` is gated by the check
engine (:mod:`minutiae.rules.counters.gate` feeds these verdicts to
:mod:`minutiae.rules.engine.engine`, whose state the state file keeps). Loading and validation:
:mod:`minutiae.rules.counters.load` (``counter_rules()``: the shipped catalog);
the examples: :mod:`minutiae.rules.counters.examples`.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from minutiae.errors import ConfigError
from minutiae.model import Action, Finding, Observation, Severity
from minutiae.model.findings import Scalar
from minutiae.model.gpu_metrics import reason_names

Values = Mapping[str, Scalar]
#: (component, metric) -> (value, epoch seconds)
Previous = Mapping[tuple[str, str], tuple[float, float]]

_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le,
    "eq": operator.eq, "ne": operator.ne,
}
OPS = frozenset({*_CMP, "gt_metric", "lt_metric", "ne_metric", "increase", "rate_per_hour",
                 "below_group_max", "bits_any"})
#: a condition metric with this prefix is read from the ``node`` component (``node.uptime_s``)
NODE_PREFIX = "node."
#: the node pseudo-metric "seconds since boot" (what /proc/uptime says)
UPTIME = "uptime_s"


def rule_error(where: str, rid: str, msg: str) -> ConfigError:
    """The error for a rule of a catalog that does not validate (the loader, the examples)."""
    return ConfigError(f"{where}: rule {rid!r}: {msg}")


@dataclass(frozen=True, slots=True)
class Condition:
    metrics: tuple[str, ...]
    op: str
    threshold: Scalar = None
    other: str | None = None
    offset: float = 0.0
    group_by: str | None = None
    mask: int = 0


@dataclass(frozen=True, slots=True)
class Gate:
    """A counter rule's time behaviour, applied by the check engine to the rule's verdicts.

    ``for_s``: the condition must be seen to hold this long before it alarms (one-shot runs:
    on runs at least this far apart, with no healthy run in between); ``clear_after_s``: it
    must be absent this long before the alarm clears; ``flap``: the alarm is not the
    condition but how often it *started*: at least ``count`` times within ``window_s``."""

    for_s: float = 0.0
    clear_after_s: float = 0.0
    flap: bool = False
    count: int = 0
    window_s: float = 0.0


@dataclass(frozen=True, slots=True)
class CounterRule:
    """One counter rule (see the module docstring for ``op``). ``when`` limits the rule to
    components whose metrics equal the given values (e.g. ``device_kind = "gpu"``); ``gate``
    (None: alarms as soon as the condition holds) is its persistence/healthy delay/flapping."""

    id: str
    kind: str
    component: str
    cond: Condition
    severity: Severity
    action: Action
    message: str
    unless: tuple[Condition, ...] = ()
    when: Mapping[str, Scalar] = field(default_factory=dict)
    description: str = ""
    gate: Gate | None = None
    #: "xid": the value is an XID code; severity, action and name come from the XID catalog
    #: (application XIDs never drain), the rule's own are for codes the catalog lacks
    catalog: str | None = None


@dataclass(frozen=True, slots=True)
class Context:
    """What a rule sees: every component's values, the previous run's values, and now."""

    values: Mapping[str, Values]
    previous: Previous
    now: float


def _value(values: Values, metrics: Sequence[str]) -> Scalar:
    if len(metrics) == 1:
        return values.get(metrics[0])
    parts = [values.get(m) for m in metrics]
    nums = [p for p in parts if isinstance(p, int | float) and not isinstance(p, bool)]
    return sum(nums) if nums else None


def _num(v: Scalar) -> float | None:
    return float(v) if isinstance(v, int | float) else None


Facts = dict[str, Scalar]


def _test(c: Condition, comp: str, ctx: Context) -> tuple[bool, Facts]:
    """Whether ``c`` holds on ``comp``, and the facts for the message. A metric written
    ``node.<name>`` is read from the node's values (e.g. ``node.uptime_s``)."""
    values = ctx.values.get(comp, {})
    if c.metrics[0].startswith(NODE_PREFIX):
        values = ctx.values.get("node", {})
        c = replace(c, metrics=tuple(m.removeprefix(NODE_PREFIX) for m in c.metrics))
    v = _value(values, c.metrics)
    if v is None:
        return False, {}
    facts: Facts = {"value": v, "threshold": c.threshold}
    op = c.op
    if op in _CMP:
        return _compare(c, v), facts
    if op in ("gt_metric", "lt_metric", "ne_metric"):
        return _vs_metric(c, v, values, facts), facts
    if op in ("increase", "rate_per_hour"):
        return _change(c, v, comp, values, ctx, facts), facts
    if op == "below_group_max":
        return _below_group(c, v, comp, values, ctx, facts), facts
    if op == "bits_any":
        if not isinstance(v, int) or isinstance(v, bool):
            return False, facts
        hit = v & c.mask
        facts["reasons"] = ", ".join(reason_names(hit))
        return hit != 0, facts
    raise AssertionError(op)


def _compare(c: Condition, v: Scalar) -> bool:
    t = c.threshold
    if isinstance(v, str) != isinstance(t, str):
        return False
    try:
        return bool(_CMP[c.op](v, t))
    except TypeError:
        return False


def _vs_metric(c: Condition, v: Scalar, values: Values, facts: Facts) -> bool:
    """``gt_metric``/``lt_metric``/``ne_metric``: against metric ``other`` of the component."""
    o = values.get(c.other or "")
    if o is None:
        return False
    facts["other"] = o
    if c.op == "ne_metric":
        return v != o
    nv, no = _num(v), _num(o)
    if nv is None or no is None:
        return False
    limit = no + c.offset
    facts["limit"] = limit
    return (nv > limit) if c.op == "gt_metric" else (nv < limit)


def _change(c: Condition, v: Scalar, comp: str, values: Values, ctx: Context, facts: Facts) -> bool:
    """``increase``/``rate_per_hour``: since the previous value (a counter that went down is a
    new baseline)."""
    # the counters this component has (an HCA may lack some of a summed list)
    present = [m for m in c.metrics if _num(values.get(m)) is not None]
    prev = [ctx.previous.get((comp, m)) for m in present]
    nv = _num(v)
    if nv is None or any(p is None for p in prev):
        return False
    pv = sum(p[0] for p in prev if p is not None)
    pt = min(p[1] for p in prev if p is not None)
    delta = nv - pv
    facts["delta"] = delta
    if delta < 0:
        return False  # counter reset: new baseline
    if c.op == "increase":
        return delta > float(c.threshold or 0)
    hours = (ctx.now - pt) / 3600.0
    if hours <= 0:
        return False
    rate = delta / hours
    facts["rate"] = round(rate, 2)
    return rate > float(c.threshold or 0)


def _below_group(c: Condition, v: Scalar, comp: str, values: Values, ctx: Context, facts: Facts) -> bool:
    """``below_group_max``: below the largest value among the components with the same
    ``group_by`` values (one metric, or several separated by commas)."""
    names = (c.group_by or "").split(",")
    key = [values.get(n) for n in names]
    prefix = comp.split(":", 1)[0] + ":"
    peers = [
        _num(_value(vals, c.metrics))
        for other, vals in ctx.values.items()
        if other.startswith(prefix) and [vals.get(n) for n in names] == key
    ]
    best = max((p for p in peers if p is not None), default=None)
    nv = _num(v)
    if best is None or nv is None:
        return False
    facts["other"] = best
    return nv < best


class _Facts(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether ``rule``'s condition holds on ``component`` now (``unless`` applied), with the
    facts its message uses. Only components that have the rule's value get a verdict."""

    rule: CounterRule
    component: str
    holds: bool
    facts: Mapping[str, Scalar]

    def finding(self) -> Finding:
        return _finding(self.rule, self.component, dict(self.facts))


def judge(rules: Sequence[CounterRule], ctx: Context) -> list[Verdict]:
    """The verdict of every rule on every component it applies to and that has its value."""
    out: list[Verdict] = []
    for rule in rules:
        # the component itself (``node``, ``ib_node``: node-level values) or one of its devices
        prefix = rule.component + ":"
        for comp in ctx.values:
            if comp != rule.component and not comp.startswith(prefix):
                continue
            vals = ctx.values[comp]
            if any(vals.get(k) != want for k, want in rule.when.items()):
                continue
            fired, facts = _test(rule.cond, comp, ctx)
            if not facts:  # the component lacks the value: no verdict either way
                continue
            if fired and any(_test(u, comp, ctx)[0] for u in rule.unless):
                fired = False
            out.append(Verdict(rule, comp, fired, facts))
    return out


def evaluate(rules: Sequence[CounterRule], ctx: Context) -> list[Finding]:
    """Every finding the rules make on the components in ``ctx`` *now*: what holds at this
    sample, before any persistence or healthy delay (:func:`minutiae.rules.counters.gate.
    gated_findings` applies those over time). Flap rules are left out: that their condition
    holds once is not what they alarm on."""
    return [v.finding() for v in judge([r for r in rules if r.gate is None or not r.gate.flap], ctx)
            if v.holds]


def boot_grace_s(rule: CounterRule) -> float:
    """How long after boot ``rule`` stays quiet: the largest ``threshold`` of its ``unless``
    conditions ``node.uptime_s lt|le N`` (0 when it has none). Replays that judge a component
    only when its values change (the simulator's eval, the backtest) judge it again then."""
    return max((float(u.threshold) for u in rule.unless
                if u.metrics == (NODE_PREFIX + UPTIME,) and u.op in ("lt", "le")
                and isinstance(u.threshold, int | float) and not isinstance(u.threshold, bool)),
               default=0.0)


def _finding(rule: CounterRule, comp: str, facts: dict[str, Scalar]) -> Finding:
    kind_, _, ident = comp.partition(":")
    pci = ident if kind_ in ("gpu", "pcie") and re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", ident) else None
    data = _Facts(facts)
    data.update(component=comp, device=ident or comp, metric="+".join(rule.cond.metrics))
    severity, action, code = rule.severity, rule.action, None
    if rule.catalog == "xid":
        severity, action, code = _xid(facts.get("value"), severity, action, data)
    message = rule.message.format_map(data)
    attrs = {k: v for k, v in facts.items() if v is not None}
    attrs["metric"] = data["metric"]
    if code is not None and data.get("name") not in (None, "?"):
        attrs["name"] = data["name"]
    return Finding(
        kind=rule.kind, severity=severity, action=action, message=message, code=code,
        pci=pci, component=comp, rule=rule.id, attrs=attrs,
    )


def _xid(value: Scalar, severity: Severity, action: Action,
         data: dict[str, Any]) -> tuple[Severity, Action, int | None]:
    """An XID code's severity and action from the XID catalog (its name into ``data``)."""
    from minutiae.rules.logs import xid_catalog

    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or value != int(value)):  # an XID is a whole number; inf/NaN (a scrape's +Inf) is none
        return severity, action, None
    code = int(value)
    entry = xid_catalog().get(code)
    if entry is None:
        data["name"] = "unknown XID"
        return severity, action, code
    data["name"] = entry.name
    return entry.severity, entry.action, code


def baseline_metrics(rules: Sequence[CounterRule]) -> frozenset[str]:
    """The metrics whose previous value some rule reads (``increase``/``rate_per_hour``): the
    only ones worth remembering between cycles."""
    return frozenset(m for r in rules for c in (r.cond, *r.unless)
                     if c.op in ("increase", "rate_per_hour") for m in c.metrics)


def context(observations: Sequence[Observation], previous: Previous, now: float,
            extra: Mapping[str, Mapping[str, Scalar]] | None = None) -> Context:
    """Group observations by component (last value wins) and add ``extra`` pseudo-metrics
    (e.g. ``node: expected_gpus`` from the configuration)."""
    values: dict[str, dict[str, Scalar]] = {}
    for o in observations:
        values.setdefault(o.component, {})[o.metric] = o.value
    for comp, vals in (extra or {}).items():
        values.setdefault(comp, {}).update({k: v for k, v in vals.items() if v is not None})
    return Context(values, previous, now)

"""Counter rules: observations (NVML, nvidia-smi, DCGM, sysfs IB/PCIe) → findings (pure).

Rules are data: ``catalog/counters.toml`` (schema in docs/check.md), validated at load, and every
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
low performance state is power saving, not a fault).
A counter that went down (reset, reboot, wrap) is a new baseline: rates/increases stay quiet.
"""

from __future__ import annotations

import operator
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from minutiae.errors import ConfigError
from minutiae.model import Action, Finding, Observation, Severity
from minutiae.model.findings import Scalar
from minutiae.parsers.nvidia_smi_common import REASONS, reason_names

Values = Mapping[str, Scalar]
#: (component, metric) -> (value, epoch seconds)
Previous = Mapping[tuple[str, str], tuple[float, float]]

_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le,
    "eq": operator.eq, "ne": operator.ne,
}
OPS = frozenset({*_CMP, "gt_metric", "lt_metric", "ne_metric", "increase", "rate_per_hour",
                 "below_group_max", "bits_any"})
COMPONENTS = frozenset({"gpu", "ib", "pcie", "node"})
_KEYS = frozenset({"id", "kind", "component", "metric", "op", "threshold", "other", "offset",
                   "group_by", "bits", "unless", "severity", "action", "message", "example",
                   "description", "when"})


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
class CounterRule:
    """One counter rule (see the module docstring for ``op``). ``when`` limits the rule to
    components whose metrics equal the given values (e.g. ``device_kind = "gpu"``)."""

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


def _test(c: Condition, comp: str, ctx: Context) -> tuple[bool, dict[str, Scalar]]:
    """Whether ``c`` holds on ``comp``, and the facts for the message."""
    values = ctx.values.get(comp, {})
    v = _value(values, c.metrics)
    if v is None:
        return False, {}
    facts: dict[str, Scalar] = {"value": v, "threshold": c.threshold}
    op = c.op
    if op in _CMP:
        t = c.threshold
        if isinstance(v, str) != isinstance(t, str):
            return False, facts
        try:
            return bool(_CMP[op](v, t)), facts
        except TypeError:
            return False, facts
    if op in ("gt_metric", "lt_metric", "ne_metric"):
        o = values.get(c.other or "")
        if o is None:
            return False, facts
        facts["other"] = o
        if op == "ne_metric":
            return v != o, facts
        nv, no = _num(v), _num(o)
        if nv is None or no is None:
            return False, facts
        limit = no + c.offset
        facts["limit"] = limit
        return (nv > limit) if op == "gt_metric" else (nv < limit), facts
    if op in ("increase", "rate_per_hour"):
        # the counters this component has (an HCA may lack some of a summed list)
        present = [m for m in c.metrics if _num(values.get(m)) is not None]
        prev = [ctx.previous.get((comp, m)) for m in present]
        nv = _num(v)
        if nv is None or any(p is None for p in prev):
            return False, facts
        pv = sum(p[0] for p in prev if p is not None)
        pt = min(p[1] for p in prev if p is not None)
        delta = nv - pv
        facts["delta"] = delta
        if delta < 0:
            return False, facts  # counter reset: new baseline
        if op == "increase":
            return delta > float(c.threshold or 0), facts
        hours = (ctx.now - pt) / 3600.0
        if hours <= 0:
            return False, facts
        rate = delta / hours
        facts["rate"] = round(rate, 2)
        return rate > float(c.threshold or 0), facts
    if op == "below_group_max":
        key = values.get(c.group_by or "")
        prefix = comp.split(":", 1)[0] + ":"
        peers = [
            _num(_value(vals, c.metrics))
            for other, vals in ctx.values.items()
            if other.startswith(prefix) and vals.get(c.group_by or "") == key
        ]
        best = max((p for p in peers if p is not None), default=None)
        nv = _num(v)
        if best is None or nv is None:
            return False, facts
        facts["other"] = best
        return nv < best, facts
    if op == "bits_any":
        if not isinstance(v, int) or isinstance(v, bool):
            return False, facts
        hit = v & c.mask
        facts["reasons"] = ", ".join(reason_names(hit))
        return hit != 0, facts
    raise AssertionError(op)


class _Facts(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


def evaluate(rules: Sequence[CounterRule], ctx: Context) -> list[Finding]:
    """Every finding the rules make on the components in ``ctx``."""
    out: list[Finding] = []
    for rule in rules:
        prefix = rule.component + ":" if rule.component != "node" else "node"
        for comp in ctx.values:
            if not (comp == "node" if rule.component == "node" else comp.startswith(prefix)):
                continue
            vals = ctx.values[comp]
            if any(vals.get(k) != want for k, want in rule.when.items()):
                continue
            fired, facts = _test(rule.cond, comp, ctx)
            if not fired:
                continue
            if any(_test(u, comp, ctx)[0] for u in rule.unless):
                continue
            out.append(_finding(rule, comp, facts))
    return out


def _finding(rule: CounterRule, comp: str, facts: dict[str, Scalar]) -> Finding:
    kind_, _, ident = comp.partition(":")
    pci = ident if kind_ in ("gpu", "pcie") and re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", ident) else None
    data = _Facts(facts)
    data.update(component=comp, device=ident or comp, metric="+".join(rule.cond.metrics))
    message = rule.message.format_map(data)
    attrs = {k: v for k, v in facts.items() if v is not None}
    attrs["metric"] = data["metric"]
    return Finding(
        kind=rule.kind, severity=rule.severity, action=rule.action, message=message,
        pci=pci, component=comp, rule=rule.id, attrs=attrs,
    )


# -- loading and validation ------------------------------------------------------------------

def _fail(where: str, rid: str, msg: str) -> ConfigError:
    return ConfigError(f"{where}: rule {rid!r}: {msg}")


def _condition(where: str, rid: str, item: Mapping[str, Any]) -> Condition:
    metric = item.get("metric")
    metrics = (metric,) if isinstance(metric, str) else tuple(metric) if isinstance(metric, list) else ()
    if not metrics or not all(isinstance(m, str) and m for m in metrics):
        raise _fail(where, rid, "metric must be a string or a list of strings")
    op = item.get("op")
    if op not in OPS:
        raise _fail(where, rid, f"op must be one of {sorted(OPS)} (got {op!r})")
    threshold = item.get("threshold")
    if (op in _CMP or op in ("increase", "rate_per_hour")) and not isinstance(
        threshold, int | float | str | bool
    ):
            raise _fail(where, rid, f"op {op} needs a threshold")
    if op in ("increase", "rate_per_hour") and (isinstance(threshold, bool) or not isinstance(threshold, int | float)):
        raise _fail(where, rid, f"op {op} needs a numeric threshold")
    other = item.get("other")
    if op in ("gt_metric", "lt_metric", "ne_metric") and not isinstance(other, str):
        raise _fail(where, rid, f"op {op} needs other = '<metric>'")
    group_by = item.get("group_by")
    if op == "below_group_max" and not isinstance(group_by, str):
        raise _fail(where, rid, "op below_group_max needs group_by = '<metric>'")
    mask = 0
    if op == "bits_any":
        bits = item.get("bits")
        if not isinstance(bits, list) or not bits:
            raise _fail(where, rid, "op bits_any needs bits = [reason names]")
        for name in bits:
            if name not in REASONS:
                raise _fail(where, rid, f"unknown clock-event reason {name!r} (one of {sorted(REASONS)})")
            mask |= REASONS[name]
    offset = item.get("offset", 0.0)
    if isinstance(offset, bool) or not isinstance(offset, int | float):
        raise _fail(where, rid, "offset must be a number")
    return Condition(metrics, op, threshold, other, float(offset), group_by, mask)


def build_rules(doc: Mapping[str, Any], where: str = "counters.toml") -> tuple[CounterRule, ...]:
    """Validate a parsed counters catalog and run every rule's examples."""
    raw = doc.get("rule")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: no [[rule]] tables")
    rules: list[CounterRule] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: rule #{i} is not a table")
        rid = item.get("id")
        if not isinstance(rid, str) or not re.fullmatch(r"[a-z0-9_.-]+", rid) or rid in seen:
            raise ConfigError(f"{where}: rule #{i}: id must be a unique [a-z0-9_.-]+ (got {rid!r})")
        seen.add(rid)
        unknown = set(item) - _KEYS
        if unknown:
            raise _fail(where, rid, f"unknown keys {sorted(unknown)}")
        kind = item.get("kind")
        if not isinstance(kind, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", kind):
            raise _fail(where, rid, f"kind must be a lower-case identifier (got {kind!r})")
        comp = item.get("component")
        if comp not in COMPONENTS:
            raise _fail(where, rid, f"component must be one of {sorted(COMPONENTS)}")
        try:
            severity = Severity[str(item.get("severity")).upper()]
            action = Action[str(item.get("action")).upper()]
        except KeyError as exc:
            raise _fail(where, rid, f"unknown severity/action {exc}") from None
        message = item.get("message")
        if not isinstance(message, str) or not message:
            raise _fail(where, rid, "message must be a non-empty string")
        unless = item.get("unless", [])
        unless = [unless] if isinstance(unless, dict) else unless
        if not isinstance(unless, list) or not all(isinstance(u, dict) for u in unless):
            raise _fail(where, rid, "unless must be a table or a list of tables")
        when = item.get("when", {})
        if not isinstance(when, dict):
            raise _fail(where, rid, "when must be a table of metric = value")
        rule = CounterRule(
            id=rid, kind=kind, component=comp, cond=_condition(where, rid, item),
            severity=severity, action=action, message=message,
            unless=tuple(_condition(where, f"{rid}.unless", u) for u in unless),
            when=dict(when), description=str(item.get("description", "")),
        )
        run_examples(rule, item.get("example"), where)
        rules.append(rule)
    return tuple(rules)


def run_examples(rule: CounterRule, examples: Any, where: str) -> None:
    """Each example: ``values`` (metric → value on one component), optional ``previous``
    (metric → value one ``elapsed_s`` ago, default 3600 s), optional ``peers`` (list of value
    tables of other components), and ``fires`` (bool)."""
    if not isinstance(examples, list) or not any(isinstance(e, dict) and e.get("fires") for e in examples):
        raise _fail(where, rule.id, "needs [[rule.example]] tables, at least one with fires = true")
    comp = "node" if rule.component == "node" else f"{rule.component}:example"
    for n, ex in enumerate(examples):
        if not isinstance(ex, dict) or not isinstance(ex.get("values"), dict) or not isinstance(ex.get("fires"), bool):
            raise _fail(where, rule.id, f"example #{n} needs values = {{...}} and fires = true/false")
        now = 1_000_000.0
        elapsed = float(ex.get("elapsed_s", 3600.0))
        values: dict[str, Values] = {comp: ex["values"]}
        for j, peer in enumerate(ex.get("peers", [])):
            values[f"{rule.component}:peer{j}"] = peer
        previous = {(comp, m): (float(v), now - elapsed) for m, v in ex.get("previous", {}).items()}
        got = [f for f in evaluate([rule], Context(values, previous, now)) if f.component == comp]
        if bool(got) != ex["fires"]:
            raise _fail(where, rule.id, f"example #{n} should {'' if ex['fires'] else 'not '}fire: {ex}")


@cache
def counter_rules() -> tuple[CounterRule, ...]:
    """The shipped counter rules (validated, examples run, once per process)."""
    # a plain file next to this module (package data); importlib.resources costs ~10 ms to import
    path = Path(__file__).with_name("catalog") / "counters.toml"
    try:
        return build_rules(tomllib.loads(path.read_text(encoding="utf-8")), str(path))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot load counter rules: {exc}") from None


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

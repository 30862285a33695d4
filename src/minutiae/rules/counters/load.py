"""Loading and validating counter-rule catalogs (``catalog/counters.toml``; schema in
docs/rules.md): every rule's instantaneous examples (``example``: values → fires) and, for rules
with a gate (``for_s``, ``clear_after_s``, ``type = "flap"``), its time-sequence examples
(``sequence``: checks at given times → alarmed after the last one) run at load, so a catalog
whose examples do not behave as written does not load.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from minutiae.errors import ConfigError
from minutiae.model import Action, Severity
from minutiae.model.gpu_metrics import REASONS
from minutiae.rules.counters.model import (
    _CMP,
    COMPONENTS,
    OPS,
    Condition,
    Context,
    CounterRule,
    Gate,
    Values,
    judge,
)
from minutiae.rules.engine.rules import parse_toml
from minutiae.rules.tables import rule_tables

_KEYS = frozenset({"id", "kind", "component", "metric", "op", "threshold", "other", "offset",
                   "group_by", "bits", "unless", "severity", "action", "message", "example",
                   "description", "when", "for_s", "clear_after_s", "type", "count", "window_s",
                   "sequence"})


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


def build_rules(doc: Mapping[str, Any], where: str = "counters.toml", *,
                examples: bool = True) -> tuple[CounterRule, ...]:
    """Validate a parsed counters catalog and run every rule's examples (``examples=False``:
    only for a document whose examples already passed, i.e. read back from the cache)."""
    rules: list[CounterRule] = []
    for rid, kind, item in rule_tables(doc, where, _KEYS):
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
            gate=_gate(where, rid, item),
        )
        if examples:
            run_examples(rule, item.get("example"), where)
            run_sequences(rule, item.get("sequence"), where)
        rules.append(rule)
    return tuple(rules)


def run_examples(rule: CounterRule, examples: Any, where: str) -> None:
    """Each example: ``values`` (metric → value on one component), optional ``previous``
    (metric → value one ``elapsed_s`` ago, default 3600 s), optional ``peers`` (list of value
    tables of other components), optional ``node`` (the node's values, read by conditions on
    ``node.<metric>``, e.g. ``node = { uptime_s = 60 }``), and ``fires`` (bool)."""
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
        if isinstance(ex.get("node"), dict) and comp != "node":  # node.<metric> values
            values["node"] = ex["node"]
        previous = {(comp, m): (float(v), now - elapsed) for m, v in ex.get("previous", {}).items()}
        # the condition (for a flap rule too: its examples say when the condition holds)
        got = [v for v in judge([rule], Context(values, previous, now)) if v.holds and v.component == comp]
        if bool(got) != ex["fires"]:
            raise _fail(where, rule.id, f"example #{n} should {'' if ex['fires'] else 'not '}fire: {ex}")


def _gate(where: str, rid: str, item: Mapping[str, Any]) -> Gate | None:
    nums: dict[str, float] = {}
    for key in ("for_s", "clear_after_s", "window_s"):
        v = item.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise _fail(where, rid, f"{key} must be a number of seconds >= 0 (got {v!r})")
        nums[key] = float(v)
    rtype = item.get("type", "condition")
    if rtype not in ("condition", "flap"):
        raise _fail(where, rid, f"type must be 'condition' or 'flap' (got {rtype!r})")
    count = item.get("count", 0)
    if rtype == "flap":
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise _fail(where, rid, "type flap needs count = <how many starts>, an integer >= 1")
        if nums["window_s"] <= 0:
            raise _fail(where, rid, "type flap needs window_s > 0")
        if item["op"] in ("increase", "rate_per_hour"):
            raise _fail(where, rid, "type flap counts how often a condition starts; use a "
                        "state condition, not a change of a counter")
    elif "count" in item or "window_s" in item:
        raise _fail(where, rid, "count and window_s belong to type = 'flap'")
    if rtype != "flap" and nums["for_s"] == 0 and nums["clear_after_s"] == 0:
        if "sequence" in item:
            raise _fail(where, rid, "sequence examples need for_s, clear_after_s or type flap")
        return None
    if "sequence" not in item:
        raise _fail(where, rid, "a rule with for_s, clear_after_s or type flap needs "
                    "sequence = [{ steps = [...], alarm = true }, ...] examples")
    return Gate(nums["for_s"], nums["clear_after_s"], rtype == "flap", int(count), nums["window_s"])


def run_sequences(rule: CounterRule, sequences: Any, where: str) -> None:
    """Each sequence example: ``steps`` (a list of ``{ t = seconds, values = {...} }``, one
    check each, in time order) and ``alarm`` (bool: alarmed after the last step); optional
    ``peers``. At least one must alarm and one must not (the gate is proven both ways)."""
    if sequences is None:
        return
    if not isinstance(sequences, list) or not sequences:
        raise _fail(where, rule.id, "sequence must be a list of { steps = [...], alarm = ... }")
    from minutiae.rules.counters.gate import run_sequence

    seen: set[bool] = set()
    for n, ex in enumerate(sequences):
        steps = ex.get("steps") if isinstance(ex, dict) else None
        if not isinstance(steps, list) or not steps or not isinstance(ex.get("alarm"), bool):
            raise _fail(where, rule.id, f"sequence #{n} needs steps = [...] and alarm = true/false")
        parsed: list[tuple[float, dict[str, Any]]] = []
        for s in steps:
            t = s.get("t") if isinstance(s, dict) else None
            if (isinstance(t, bool) or not isinstance(t, int | float) or not isinstance(s.get("values"), dict)
                    or (parsed and t < parsed[-1][0])):
                raise _fail(where, rule.id, f"sequence #{n}: each step needs t (seconds, in "
                            f"order) and values = {{...}} (got {s!r})")
            parsed.append((float(t), s["values"]))
        got = run_sequence(rule, parsed, ex.get("peers", []))
        if got != ex["alarm"]:
            raise _fail(where, rule.id, f"sequence #{n} should {'' if ex['alarm'] else 'not '}"
                        f"alarm after its last step: {ex}")
        seen.add(got)
    if seen != {True, False}:
        raise _fail(where, rule.id, "needs sequence examples that alarm and that do not")


#: the modules whose code decides how a catalog document becomes rules: a cached document is
#: only trusted while they are unchanged
#: the code whose change invalidates a cached catalog (paths relative to ``minutiae/rules``)
_CODE = ("counters/model.py", "counters/load.py", "counters/gate.py", "engine/engine.py",
         "engine/rules.py")


def load_rules(path: Path, cache_dir: Path | None = None) -> tuple[CounterRule, ...]:
    """Rules from a counters catalog file, through the parsed-catalog cache in ``cache_dir``
    (when given): a current cache entry skips TOML parsing and the examples it already passed."""
    from minutiae.rules.cache import load_cached, store_cached

    code = [Path(__file__).parent.parent / n for n in _CODE]
    doc = load_cached(path, cache_dir, code) if cache_dir is not None else None
    if doc is not None:
        try:
            return build_rules(doc, str(path), examples=False)
        except ConfigError:
            pass  # a damaged cache: parse the file
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot load counter rules: {exc}") from None
    doc = parse_toml(text, str(path))
    rules = build_rules(doc, str(path))
    if cache_dir is not None:
        store_cached(path, cache_dir, code, doc)
    return rules

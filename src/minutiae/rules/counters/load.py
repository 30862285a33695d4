"""Loading and validating counter-rule catalogs; ``counter_rules()`` is the shipped catalog (``catalog/counters.toml``; schema in
docs/rules.md): every rule's instantaneous examples (``example``: values → fires) and, for rules
with a gate (``for_s``, ``clear_after_s``, ``type = "flap"``), its time-sequence examples
(``sequence``: checks at given times → alarmed after the last one) run at load, so a catalog
whose examples do not behave as written does not load.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from minutiae.errors import ConfigError
from minutiae.model import Action, Severity
from minutiae.model.gpu_metrics import REASONS
from minutiae.rules.counters.examples import run_examples, run_sequences
from minutiae.rules.counters.model import (
    _CMP,
    OPS,
    Condition,
    CounterRule,
    Gate,
    rule_error,
)
from minutiae.rules.engine.rules import parse_toml
from minutiae.rules.tables import rule_tables

#: a rule's ``component``: the prefix of the components it reads (``gpu``, ``ib``, ``pcie``, ``node``,
#: or a new source's); a test in tests/node checks that some registered source delivers it
COMPONENT = re.compile(r"[a-z][a-z0-9_]*")

_KEYS = frozenset({"id", "kind", "component", "metric", "op", "threshold", "other", "offset",
                   "group_by", "bits", "unless", "severity", "action", "message", "example",
                   "description", "when", "for_s", "clear_after_s", "type", "count", "window_s",
                   "sequence", "catalog"})


def _condition(where: str, rid: str, item: Mapping[str, Any]) -> Condition:
    metric = item.get("metric")
    metrics = (metric,) if isinstance(metric, str) else tuple(metric) if isinstance(metric, list) else ()
    if not metrics or not all(isinstance(m, str) and m for m in metrics):
        raise rule_error(where, rid, "metric must be a string or a list of strings")
    op = item.get("op")
    if op not in OPS:
        raise rule_error(where, rid, f"op must be one of {sorted(OPS)} (got {op!r})")
    threshold = item.get("threshold")
    if (op in _CMP or op in ("increase", "rate_per_hour")) and not isinstance(
        threshold, int | float | str | bool
    ):
            raise rule_error(where, rid, f"op {op} needs a threshold")
    if op in ("increase", "rate_per_hour") and (isinstance(threshold, bool) or not isinstance(threshold, int | float)):
        raise rule_error(where, rid, f"op {op} needs a numeric threshold")
    other = item.get("other")
    if op in ("gt_metric", "lt_metric", "ne_metric") and not isinstance(other, str):
        raise rule_error(where, rid, f"op {op} needs other = '<metric>'")
    group_by = item.get("group_by")
    if op == "below_group_max" and not isinstance(group_by, str):
        raise rule_error(where, rid, "op below_group_max needs group_by = '<metric>'")
    mask = 0
    if op == "bits_any":
        bits = item.get("bits")
        if not isinstance(bits, list) or not bits:
            raise rule_error(where, rid, "op bits_any needs bits = [reason names]")
        for name in bits:
            if name not in REASONS:
                raise rule_error(where, rid, f"unknown clock-event reason {name!r} (one of {sorted(REASONS)})")
            mask |= REASONS[name]
    offset = item.get("offset", 0.0)
    if isinstance(offset, bool) or not isinstance(offset, int | float):
        raise rule_error(where, rid, "offset must be a number")
    return Condition(metrics, op, threshold, other, float(offset), group_by, mask)


def build_rules(doc: Mapping[str, Any], where: str = "counters.toml", *,
                examples: bool = True) -> tuple[CounterRule, ...]:
    """Validate a parsed counters catalog and run every rule's examples (``examples=False``:
    only for a document whose examples already passed, i.e. read back from the cache)."""
    rules: list[CounterRule] = []
    for rid, kind, item in rule_tables(doc, where, _KEYS):
        comp = item.get("component")
        if not isinstance(comp, str) or not COMPONENT.fullmatch(comp):
            raise rule_error(where, rid, "component must be a source's component prefix "
                             "(gpu, ib, pcie, node, …: lower-case letters, digits, _)")
        try:
            severity = Severity[str(item.get("severity")).upper()]
            action = Action[str(item.get("action")).upper()]
        except KeyError as exc:
            raise rule_error(where, rid, f"unknown severity/action {exc}") from None
        message = item.get("message")
        if not isinstance(message, str) or not message:
            raise rule_error(where, rid, "message must be a non-empty string")
        unless = item.get("unless", [])
        unless = [unless] if isinstance(unless, dict) else unless
        if not isinstance(unless, list) or not all(isinstance(u, dict) for u in unless):
            raise rule_error(where, rid, "unless must be a table or a list of tables")
        when = item.get("when", {})
        if not isinstance(when, dict):
            raise rule_error(where, rid, "when must be a table of metric = value")
        catalog = item.get("catalog")
        if catalog not in (None, "xid"):
            raise rule_error(where, rid, f"catalog must be 'xid' (got {catalog!r})")
        rule = CounterRule(
            id=rid, kind=kind, component=comp, cond=_condition(where, rid, item), catalog=catalog,
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


def _gate(where: str, rid: str, item: Mapping[str, Any]) -> Gate | None:
    nums: dict[str, float] = {}
    for key in ("for_s", "clear_after_s", "window_s"):
        v = item.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise rule_error(where, rid, f"{key} must be a number of seconds >= 0 (got {v!r})")
        nums[key] = float(v)
    rtype = item.get("type", "condition")
    if rtype not in ("condition", "flap"):
        raise rule_error(where, rid, f"type must be 'condition' or 'flap' (got {rtype!r})")
    count = item.get("count", 0)
    if rtype == "flap":
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise rule_error(where, rid, "type flap needs count = <how many starts>, an integer >= 1")
        if nums["window_s"] <= 0:
            raise rule_error(where, rid, "type flap needs window_s > 0")
        if item["op"] in ("increase", "rate_per_hour"):
            raise rule_error(where, rid, "type flap counts how often a condition starts; use a "
                        "state condition, not a change of a counter")
    elif "count" in item or "window_s" in item:
        raise rule_error(where, rid, "count and window_s belong to type = 'flap'")
    if rtype != "flap" and nums["for_s"] == 0 and nums["clear_after_s"] == 0:
        if "sequence" in item:
            raise rule_error(where, rid, "sequence examples need for_s, clear_after_s or type flap")
        return None
    if "sequence" not in item:
        raise rule_error(where, rid, "a rule with for_s, clear_after_s or type flap needs "
                    "sequence = [{ steps = [...], alarm = true }, ...] examples")
    return Gate(nums["for_s"], nums["clear_after_s"], rtype == "flap", int(count), nums["window_s"])


#: the modules whose code decides how a catalog document becomes rules: a cached document is
#: only trusted while they are unchanged
#: the code whose change invalidates a cached catalog (paths relative to ``minutiae/rules``)
_CODE = ("counters/model.py", "counters/load.py", "counters/gate.py", "counters/examples.py",
         "engine/engine.py", "engine/rules.py")


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


#: the shipped counter-rule catalog (package data)
CATALOG = Path(__file__).parent.parent / "catalog" / "counters.toml"


@cache
def counter_rules(cache_dir: Path | None = None) -> tuple[CounterRule, ...]:
    """The shipped counter rules (validated, examples run, once per process). With
    ``cache_dir`` the parsed catalog is cached there (keyed by the file's mtime and size), and
    a run that finds it current skips TOML parsing and the examples it already passed."""
    return load_rules(CATALOG, cache_dir)

"""The topology check's rules, as data: ``profiles/topology_rules.toml`` (shipped in the package,
validated at load; every rule carries examples that the tests run).

Each rule maps one profile attribute to a finding kind, severity, action and a comparison:
``at_least`` (a problem only below the expected value), ``pcie`` (``GENxWIDTH`` lower in
generation or width), ``subset`` (an expected name is absent), ``true`` (expected true, got
false), ``equal`` (any difference).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from importlib import resources
from typing import Any

from minutiae.analyses.topology.profile import ATTRIBUTES, Value
from minutiae.errors import ConfigError
from minutiae.model.vocab import Action, Severity


class Compare(Enum):
    AT_LEAST = "at_least"
    PCIE = "pcie"
    SUBSET = "subset"
    TRUE = "true"
    EQUAL = "equal"


@dataclass(frozen=True, slots=True)
class RuleExample:
    actual: Value
    expected: Value
    finding: bool


@dataclass(frozen=True, slots=True)
class TopoRule:
    attribute: str
    kind: str
    severity: Severity
    action: Action
    compare: Compare
    examples: tuple[RuleExample, ...]

    def deviates(self, actual: Value, expected: Value) -> bool:
        return _deviates(self.compare, actual, expected)


def _pcie_parts(s: str) -> tuple[int | None, int | None]:
    m = re.fullmatch(r"(\d+|\?)x(\d+|\?)", s.strip())
    if not m:
        return None, None
    return (None if m.group(1) == "?" else int(m.group(1)),
            None if m.group(2) == "?" else int(m.group(2)))


def _deviates(how: Compare, actual: Value, expected: Value) -> bool:
    if how is Compare.AT_LEAST:
        return float(actual) < float(expected)
    if how is Compare.PCIE:
        ag, aw = _pcie_parts(str(actual))
        eg, ew = _pcie_parts(str(expected))
        return (ag is not None and eg is not None and ag < eg) or (
            aw is not None and ew is not None and aw < ew)
    if how is Compare.SUBSET:
        return bool(set(str(expected).split(",")) - set(str(actual).split(",")))
    if how is Compare.TRUE:
        return bool(expected) and not bool(actual)
    return actual != expected


def parse_rules(text: str, where: str = "topology_rules.toml") -> dict[str, TopoRule]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML ({exc})") from None
    rules: dict[str, TopoRule] = {}
    for i, raw in enumerate(doc.get("rule", [])):
        w = f"{where}: rule {i + 1}"
        if not isinstance(raw, dict):
            raise ConfigError(f"{w}: must be a table")
        unknown = set(raw) - {"attribute", "kind", "severity", "action", "compare", "examples"}
        if unknown:
            raise ConfigError(f"{w}: unknown key(s) {', '.join(sorted(unknown))}")
        attr = raw.get("attribute")
        if attr not in ATTRIBUTES:
            raise ConfigError(f"{w}: unknown attribute {attr!r}")
        if attr in rules:
            raise ConfigError(f"{w}: second rule for {attr}")
        kind = raw.get("kind")
        if not isinstance(kind, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", kind):
            raise ConfigError(f"{w}: kind must be a lower_snake_case name")
        try:
            sev = Severity(Severity.parse(str(raw.get("severity"))))
            act = Action(Action.parse(str(raw.get("action"))))
            how = Compare(raw.get("compare"))
        except ValueError as exc:
            raise ConfigError(f"{w}: {exc}") from None
        examples = []
        for ex in raw.get("examples", []):
            if not isinstance(ex, dict) or set(ex) != {"actual", "expected", "finding"} or \
                    not isinstance(ex["finding"], bool):
                raise ConfigError(f"{w}: each example needs actual, expected and finding (bool)")
            examples.append(RuleExample(_value(ex["actual"], w), _value(ex["expected"], w),
                                        ex["finding"]))
        if not examples:
            raise ConfigError(f"{w} ({attr}): no examples")
        rules[attr] = TopoRule(attr, kind, sev, act, how, tuple(examples))
    missing = [a for a in ATTRIBUTES if a not in rules]
    if missing:
        raise ConfigError(f"{where}: no rule for {', '.join(missing)}")
    return rules


def _value(v: Any, w: str) -> Value:
    if isinstance(v, str | int | float | bool):
        return v
    raise ConfigError(f"{w}: example value {v!r} is not a scalar")


@lru_cache(maxsize=1)
def rules() -> dict[str, TopoRule]:
    """The shipped rules (loaded and validated once)."""
    text = resources.files("minutiae.analyses.topology").joinpath("profiles/topology_rules.toml").read_text(
        encoding="utf-8")
    return parse_rules(text)

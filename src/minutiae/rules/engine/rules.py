"""Engine rules as data: the schema of ``[[rule]]`` tables in engine-rule catalogs
(``rules/catalog/log_counts.toml`` and site files), validated at load. Documented in
docs/rules.md. Counter rules with a gate (``for_s``, ``clear_after_s``, ``type = "flap"``)
become engine rules too (:mod:`minutiae.rules.counters.gate`).

A rule watches either **observations** (``on = "observation"``: counter/NVML values from the
sources, matched by ``metric``/``source``/``component`` globs) or **findings** (``on =
"finding"``: kernel-log findings, matched by ``match_kind``/``match_code``/``match_rule``), keyed
per component (or per GPU, or per node), and computes one value per key:

==============  ==========================================================================
``type``        value compared with ``op threshold``
==============  ==========================================================================
``threshold``   the latest observed value (numbers; ``==``/``!=`` also compare text)
``delta``       increase of a cumulative counter over ``window_s`` (resets handled)
``rate``        that increase per ``per_s`` seconds (e.g. ``per_s = 3600``: per hour)
``count``       number of matching findings in ``window_s`` (0 = since boot)
``onsets``      number of times the observed value turned true (non-zero) within
                ``window_s``: how often a condition *started* (a link going down), not
                whether it holds now; the counter rules' ``type = "flap"`` uses it
==============  ==========================================================================

Debounce and hysteresis: ``boot_grace_s`` ignores samples/findings in the first seconds after
boot, ``for_s`` requires the condition to hold that long before alarming, ``clear_after_s``
requires it to be healthy that long before clearing, and ``flap_transitions`` alarm
transitions within ``flap_window_s`` mark the key as flapping (``flap_severity``/``flap_action``).
``max_gap_s`` (0 = off): a gap between two judged values longer than this restarts the current
bad/healthy stretch, so persistence is only ever concluded from values seen that far apart.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minutiae.errors import ConfigError
from minutiae.model.vocab import Action, Severity
from minutiae.rules.tables import rule_tables

OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
    "==": operator.eq, "!=": operator.ne,
}
TYPES = frozenset({"threshold", "delta", "rate", "count", "onsets"})
GROUPS = frozenset({"component", "pci", "node"})


@dataclass(frozen=True, slots=True)
class Example:
    """A test case shipped with the rule: ``samples`` are ``(t, value)`` (observation rules) or
    ``(t, 1)`` (finding rules), t in seconds after the start; ``boot_at`` is the boot time
    relative to the start; the rule must (not) be alarmed, and flapping, after the last one."""

    samples: tuple[tuple[float, Any], ...]
    alarm: bool
    flapping: bool | None = None
    boot_at: float | None = None
    component: str = "c0"


@dataclass(frozen=True, slots=True)
class EngineRule:
    """One validated engine rule (see the module docstring for the meaning of each field)."""

    id: str
    kind: str
    on: str
    type: str
    op: str
    threshold: float | str
    severity: Severity
    action: Action
    message: str
    reason: str
    metric: str = "*"
    source: str = "*"
    component: str = "*"
    match_kind: str = "*"
    match_codes: tuple[int, ...] = ()
    match_rule: str = "*"
    group_by: str = "component"
    window_s: float = 0.0
    per_s: float = 1.0
    for_s: float = 0.0
    clear_after_s: float = 0.0
    boot_grace_s: float = 0.0
    flap_transitions: int = 0
    flap_window_s: float = 3600.0
    flap_severity: Severity | None = None
    flap_action: Action | None = None
    examples: tuple[Example, ...] = ()
    max_gap_s: float = 0.0

    def compare(self, value: Any) -> bool:
        """``value op threshold``; False for values that cannot be compared."""
        fn = OPS[self.op]
        if isinstance(self.threshold, str):
            return bool(fn(str(value), self.threshold))
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, int | float):
            return False
        return bool(fn(value, self.threshold))


_KEYS = frozenset({
    "id", "kind", "on", "type", "op", "threshold", "severity", "action", "message", "reason",
    "metric", "source", "component", "match_kind", "match_code", "match_rule", "group_by",
    "window_s", "per_s", "for_s", "clear_after_s", "boot_grace_s", "flap_transitions",
    "flap_window_s", "flap_severity", "flap_action", "examples", "description", "max_gap_s",
})


def _reason(rid: str) -> str:
    return "".join(p.capitalize() for p in re.split(r"[^A-Za-z0-9]+", rid) if p)


def _num(where: str, rid: str, item: Mapping[str, Any], key: str, default: float) -> float:
    v = item.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
        raise ConfigError(f"{where}: rule {rid!r}: {key} must be a number >= 0 (got {v!r})")
    return float(v)


def _example(where: str, rid: str, raw: Any) -> Example:
    if not isinstance(raw, dict) or "alarm" not in raw or "samples" not in raw:
        raise ConfigError(f"{where}: rule {rid!r}: each example needs samples and alarm")
    samples: list[tuple[float, Any]] = []
    for s in raw["samples"]:
        if isinstance(s, int | float):
            samples.append((float(s), 1))
        elif isinstance(s, list) and len(s) == 2 and isinstance(s[0], int | float):
            samples.append((float(s[0]), s[1]))
        else:
            raise ConfigError(f"{where}: rule {rid!r}: bad example sample {s!r} (want [t, value])")
    return Example(
        samples=tuple(samples), alarm=bool(raw["alarm"]),
        flapping=raw.get("flapping"), boot_at=raw.get("boot_at"),
        component=str(raw.get("component", "c0")),
    )


def build_engine_rules(doc: Mapping[str, Any], where: str) -> tuple[EngineRule, ...]:
    """Validate parsed TOML (``[[rule]]`` tables) into engine rules; ConfigError names the rule."""
    return tuple(_engine_rule(where, rid, kind, item)
                 for rid, kind, item in rule_tables(doc, where, _KEYS, required=False))


Bad = Callable[[str], ConfigError]


def _engine_rule(where: str, rid: str, kind: str, item: Mapping[str, Any]) -> EngineRule:
    def bad(msg: str) -> ConfigError:
        return ConfigError(f"{where}: rule {rid!r}: {msg}")

    on, rtype, op, threshold = _test_of(item, bad)
    severity, action, fsev, fact = _grades(item, bad)
    codes, group_by = _matching(item, bad)
    window = _num(where, rid, item, "window_s", 0.0)
    if rtype in ("rate", "delta", "onsets") and window <= 0:
        raise bad(f"type {rtype} needs window_s > 0")
    per_s = _num(where, rid, item, "per_s", 1.0)
    if per_s <= 0:
        raise bad("per_s must be > 0")
    flaps = item.get("flap_transitions", 0)
    if isinstance(flaps, bool) or not isinstance(flaps, int) or flaps < 0 or flaps == 1:
        raise bad("flap_transitions must be 0 (off) or an integer >= 2")
    message = item.get("message", "{kind} on {component}: {value} (threshold {threshold})")
    if not isinstance(message, str):
        raise bad("message must be a string")
    for name in ("metric", "source", "component", "match_kind", "match_rule"):
        if not isinstance(item.get(name, "*"), str):
            raise bad(f"{name} must be a string (a glob)")
    examples = tuple(_example(where, rid, e) for e in item.get("examples", []))
    if not examples:
        raise bad("needs at least one [[rule.examples]] (a test runs them)")
    return EngineRule(
        id=rid, kind=kind, on=on, type=rtype, op=op, threshold=threshold,
        severity=severity, action=action, message=message,
        reason=str(item.get("reason", _reason(rid))),
        metric=item.get("metric", "*"), source=item.get("source", "*"),
        component=item.get("component", "*"), match_kind=item.get("match_kind", "*"),
        match_codes=tuple(codes), match_rule=item.get("match_rule", "*"),
        group_by=group_by, window_s=window, per_s=per_s,
        for_s=_num(where, rid, item, "for_s", 0.0),
        clear_after_s=_num(where, rid, item, "clear_after_s", 0.0),
        boot_grace_s=_num(where, rid, item, "boot_grace_s", 0.0),
        flap_transitions=flaps,
        flap_window_s=_num(where, rid, item, "flap_window_s", 3600.0),
        flap_severity=fsev, flap_action=fact, examples=examples,
        max_gap_s=_num(where, rid, item, "max_gap_s", 0.0),
    )


def _test_of(item: Mapping[str, Any], bad: Bad) -> tuple[str, str, str, Any]:
    """``on``, ``type``, ``op`` and ``threshold`` of a rule, checked together."""
    on = item.get("on", "observation")
    if on not in ("observation", "finding"):
        raise bad(f"on must be 'observation' or 'finding' (got {on!r})")
    rtype = item.get("type", "count" if on == "finding" else "threshold")
    if rtype not in TYPES:
        raise bad(f"type must be one of {sorted(TYPES)} (got {rtype!r})")
    if (on == "finding") != (rtype == "count"):
        raise bad("finding rules use type 'count'; observation rules threshold/delta/rate/onsets")
    op = item.get("op", ">=" if rtype in ("count", "onsets") else ">")
    if op not in OPS:
        raise bad(f"op must be one of {sorted(OPS)} (got {op!r})")
    threshold = item.get("threshold", 1 if rtype in ("count", "onsets") else None)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float | str):
        raise bad("threshold must be a number (or text with == / !=)")
    if isinstance(threshold, str) and (op not in ("==", "!=") or rtype != "threshold"):
        raise bad("a text threshold only works with type threshold and op == or !=")
    return on, rtype, op, threshold


def _grades(item: Mapping[str, Any], bad: Bad) -> tuple[Severity, Action, Severity | None, Action | None]:
    """Severity and action, and those of a flapping alarm."""
    try:
        severity = Severity(Severity.parse(str(item.get("severity", ""))))
        action = Action(Action.parse(str(item.get("action", "none"))))
        fsev = (Severity(Severity.parse(str(item["flap_severity"])))
                if "flap_severity" in item else None)
        fact = Action(Action.parse(str(item["flap_action"]))) if "flap_action" in item else None
    except ValueError as exc:
        raise bad(str(exc)) from exc
    return severity, action, fsev, fact


def _matching(item: Mapping[str, Any], bad: Bad) -> tuple[list[int], str]:
    """The codes a finding rule matches and what a rule's values are grouped by."""
    codes = item.get("match_code", [])
    codes = [codes] if isinstance(codes, int) else codes
    if not isinstance(codes, list) or not all(isinstance(c, int) for c in codes):
        raise bad("match_code must be an integer or a list of integers")
    group_by = item.get("group_by", "component")
    if group_by not in GROUPS:
        raise bad(f"group_by must be one of {sorted(GROUPS)}")
    return codes, str(group_by)


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """TOML text → dict; a syntax error is a ``ConfigError`` naming ``where`` (tomllib is
    imported here, not at module load: a one-shot check whose catalogs come from the
    cache never needs it)."""
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from None


def load_engine_rules_text(text: str, where: str) -> tuple[EngineRule, ...]:
    return build_engine_rules(parse_toml(text, where), where)


def load_engine_rules(path: Path) -> tuple[EngineRule, ...]:
    """Engine rules from a TOML file (e.g. a site's own thresholds)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read rules: {exc}") from exc
    return load_engine_rules_text(text, str(path))


#: shipped engine-rule catalogs (``counters.toml`` has its own schema: checks/counters_schema.py)
SHIPPED = ("log_counts.toml",)


def shipped_engine_rules(cache_dir: Path | None = None) -> tuple[EngineRule, ...]:
    """Every engine rule shipped in the package (:data:`SHIPPED`; plain files next to this
    module: importing ``importlib.resources`` would cost a one-shot check ~10 ms). With
    ``cache_dir``, parsed catalogs are cached there (:mod:`minutiae.rules.cache`)."""
    out: list[EngineRule] = []
    base = Path(__file__).parent.parent / "catalog"
    code = [Path(__file__), Path(__file__).with_name("engine.py")]
    for name in SHIPPED:
        f = base / name
        if not f.is_file():
            continue
        if cache_dir is not None:
            from minutiae.rules.cache import load_cached, store_cached

            doc = load_cached(f, cache_dir, code)
            if doc is not None:
                try:
                    out.extend(build_engine_rules(doc, name))
                    continue
                except ConfigError:
                    pass  # a damaged cache: parse the file
            doc = parse_toml(f.read_text(encoding="utf-8"), name)
            out.extend(build_engine_rules(doc, name))
            store_cached(f, cache_dir, code, doc)
        else:
            out.extend(load_engine_rules_text(f.read_text(encoding="utf-8"), name))
    return tuple(out)

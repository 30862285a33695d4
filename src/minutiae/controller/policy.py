"""The remediation policy: TOML data, validated at load (``ConfigError`` names the key).

One scheduler-neutral file says which findings lead to which action, the escalation ladder,
the healthy delay before a node returns to service, lemon tracking and the safety budget.
The shipped default is ``default_policy.toml`` beside this module; the reference is in
docs/controller.md. Every rule carries examples that tests run (``Rule.examples``).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any

from minutiae.controller.budget import BudgetConfig, RateLimit, StormConfig
from minutiae.errors import ConfigError, InputError
from minutiae.inputs import read_bounded
from minutiae.model import Action, Finding, Severity

DEFAULT_POLICY = "default_policy.toml"


class RuleDo(Enum):
    """What a matching finding asks for: ``drain`` the node, ``ignore`` the finding (it can
    never drain on its own, e.g. application XIDs), or ``notify`` only."""

    DRAIN = "drain"
    IGNORE = "ignore"
    NOTIFY = "notify"


@dataclass(frozen=True, slots=True)
class RuleExample:
    """A finding a test feeds to the policy, and what the policy must answer."""

    kind: str
    expect: RuleDo
    code: int | None = None
    severity: Severity = Severity.ERROR
    action: Action = Action.NONE

    def finding(self) -> Finding:
        return Finding(kind=self.kind, severity=self.severity, action=self.action,
                       message=f"example {self.kind}", code=self.code)


@dataclass(frozen=True, slots=True)
class Rule:
    """Matches a finding when every given criterion holds (empty sets match anything)."""

    name: str
    do: RuleDo
    kinds: frozenset[str] = frozenset()
    codes: frozenset[int] = frozenset()
    min_severity: Severity = Severity.INFO
    min_action: Action = Action.NONE
    step: Action | None = None
    description: str = ""
    examples: tuple[RuleExample, ...] = ()

    def matches(self, f: Finding) -> bool:
        return ((not self.kinds or f.kind in self.kinds)
                and (not self.codes or f.code in self.codes)
                and f.severity >= self.min_severity
                and f.action >= self.min_action)


@dataclass(frozen=True, slots=True)
class LadderStep:
    """One rung of the escalation ladder; ``timeout_s`` None means wait for a human."""

    step: Action
    timeout_s: float | None


@dataclass(frozen=True, slots=True)
class LemonConfig:
    """``drains`` drains within ``days`` days make a node a lemon: straight to inspection,
    never returned to service automatically."""

    drains: int = 3
    days: float = 7.0


@dataclass(frozen=True, slots=True)
class Policy:
    rules: tuple[Rule, ...]
    ladder: tuple[LadderStep, ...]
    dry_run: bool = True
    healthy_delay_s: float = 600.0
    stale_after_s: float = 120.0
    lemon: LemonConfig = field(default_factory=LemonConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    source: str = "<built-in>"
    #: which of the scheduler's nodes are this controller's fleet (a regular expression over
    #: node names; empty: all of them). Fleet nodes that never report count as silent.
    fleet_nodes: str = ""

    def in_fleet(self, node: str) -> bool:
        return not self.fleet_nodes or re.fullmatch(self.fleet_nodes, node) is not None

    def rule_for(self, f: Finding) -> Rule | None:
        """The first rule that matches ``f`` (rules are ordered; first match wins)."""
        for r in self.rules:
            if r.matches(f):
                return r
        return None

    def ladder_index(self, step: Action) -> int:
        """Index of the first rung at or above ``step`` (the last rung when none is)."""
        for i, rung in enumerate(self.ladder):
            if rung.step >= step:
                return i
        return len(self.ladder) - 1


# ---------------------------------------------------------------------------------------------
# loading and validation

def _err(where: str, key: str, msg: str) -> ConfigError:
    return ConfigError(f"{where}: {key}: {msg}")


def _table(d: Any, where: str, key: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise _err(where, key, "must be a table")
    return d


def _only(d: Mapping[str, Any], allowed: set[str], where: str, key: str) -> None:
    for k in d:
        if k not in allowed:
            name = f"{key}.{k}" if key else k
            raise _err(where, name, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _num(d: Mapping[str, Any], k: str, default: float, where: str, key: str,
         lo: float = 0.0, hi: float | None = None) -> float:
    v = d.get(k, default)
    name = f"{key}.{k}" if key else k
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _err(where, name, f"must be a number, got {v!r}")
    if not math.isfinite(v):
        raise _err(where, name, f"must be a finite number, got {v!r}")
    if v < lo or (hi is not None and v > hi):
        rng = f"between {lo:g} and {hi:g}" if hi is not None else f">= {lo:g}"
        raise _err(where, name, f"must be {rng}, got {v!r}")
    return float(v)


def _int(d: Mapping[str, Any], k: str, default: int, where: str, key: str, lo: int = 0) -> int:
    v = d.get(k, default)
    name = f"{key}.{k}" if key else k
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise _err(where, name, f"must be an integer >= {lo}, got {v!r}")
    return v


def _enum(cls: Any, v: Any, where: str, key: str) -> Any:
    try:
        return cls.parse(v) if hasattr(cls, "parse") else cls(v)
    except (ValueError, AttributeError, TypeError) as exc:
        raise _err(where, key, str(exc) if hasattr(cls, "parse") else
                   f"must be one of {', '.join(m.value for m in cls)}, got {v!r}") from None


def _rule(d: Any, i: int, where: str) -> Rule:
    key = f"rule[{i}]"
    t = _table(d, where, key)
    _only(t, {"name", "do", "kinds", "codes", "min_severity", "min_action", "step",
              "description", "examples"}, where, key)
    name = t.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _err(where, f"{key}.name", "must be a non-empty string")
    key = f"rule[{name}]"
    do = _enum(RuleDo, t.get("do"), where, f"{key}.do")
    kinds = t.get("kinds", [])
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise _err(where, f"{key}.kinds", "must be a list of finding kinds")
    codes = t.get("codes", [])
    if not isinstance(codes, list) or not all(isinstance(c, int) and not isinstance(c, bool)
                                              for c in codes):
        raise _err(where, f"{key}.codes", "must be a list of integers")
    sev = _enum(Severity, t.get("min_severity", "info"), where, f"{key}.min_severity")
    act = _enum(Action, t.get("min_action", "none"), where, f"{key}.min_action")
    step = None
    if "step" in t:
        step = _enum(Action, t["step"], where, f"{key}.step")
        if not step.drains:
            raise _err(where, f"{key}.step", "must be reset_gpu, reboot or inspect")
    desc = t.get("description", "")
    if not isinstance(desc, str):
        raise _err(where, f"{key}.description", "must be a string")
    examples = []
    raw_ex = t.get("examples", [])
    if not isinstance(raw_ex, list) or not raw_ex:
        raise _err(where, f"{key}.examples", "every rule needs at least one example")
    for j, e in enumerate(raw_ex):
        ek = f"{key}.examples[{j}]"
        et = _table(e, where, ek)
        _only(et, {"kind", "code", "severity", "action", "expect"}, where, ek)
        if not isinstance(et.get("kind"), str):
            raise _err(where, f"{ek}.kind", "must be a string")
        code = et.get("code")
        if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
            raise _err(where, f"{ek}.code", "must be an integer")
        examples.append(RuleExample(
            kind=et["kind"], code=code,
            severity=_enum(Severity, et.get("severity", "error"), where, f"{ek}.severity"),
            action=_enum(Action, et.get("action", "none"), where, f"{ek}.action"),
            expect=_enum(RuleDo, et.get("expect"), where, f"{ek}.expect")))
    return Rule(name=name, do=do, kinds=frozenset(kinds), codes=frozenset(codes),
                min_severity=sev, min_action=act, step=step, description=desc,
                examples=tuple(examples))


def _budget(d: Any, where: str) -> BudgetConfig:
    t = _table(d, where, "budget")
    _only(t, {"max_unavailable_fraction", "per_job_max_nodes", "domain_caps", "rate", "storm"},
          where, "budget")
    caps_t = _table(t.get("domain_caps", {}), where, "budget.domain_caps")
    caps = {k: _int(caps_t, k, 0, where, "budget.domain_caps") for k in caps_t}
    rates = {}
    rate_t = _table(t.get("rate", {}), where, "budget.rate")
    _only(rate_t, {"drain", "resume", "escalate"}, where, "budget.rate")
    for verb, r in rate_t.items():
        rk = f"budget.rate.{verb}"
        rt = _table(r, where, rk)
        _only(rt, {"per_minute", "burst"}, where, rk)
        rates[verb] = RateLimit(per_minute=_num(rt, "per_minute", 1.0, where, rk),
                                burst=_num(rt, "burst", 1.0, where, rk, lo=1.0))
    st = _table(t.get("storm", {}), where, "budget.storm")
    _only(st, {"fraction", "window_s", "min_nodes"}, where, "budget.storm")
    storm = StormConfig(fraction=_num(st, "fraction", 0.10, where, "budget.storm", 0.0, 1.0),
                        window_s=_num(st, "window_s", 600.0, where, "budget.storm", lo=1.0),
                        min_nodes=_int(st, "min_nodes", 3, where, "budget.storm", lo=1))
    return BudgetConfig(
        max_unavailable_fraction=_num(t, "max_unavailable_fraction", 0.10, where, "budget",
                                      0.0, 1.0),
        domain_caps=caps,
        per_job_max_nodes=_int(t, "per_job_max_nodes", 1, where, "budget"),
        rates=rates, storm=storm)


def parse_policy(data: Mapping[str, Any], where: str = "<policy>") -> Policy:
    """Validate a decoded TOML document into a :class:`Policy`."""
    _only(data, {"dry_run", "healthy_delay_s", "stale_after_s", "fleet_nodes", "rule", "ladder",
                 "lemon", "budget"}, where, "")
    fleet = data.get("fleet_nodes", "")
    if not isinstance(fleet, str):
        raise _err(where, "fleet_nodes", "must be a regular expression (a string)")
    try:
        re.compile(fleet)
    except re.error as exc:
        raise _err(where, "fleet_nodes", f"not a regular expression: {exc}") from None
    dry = data.get("dry_run", True)
    if not isinstance(dry, bool):
        raise _err(where, "dry_run", "must be true or false")
    raw_rules = data.get("rule", [])
    if not isinstance(raw_rules, list) or not raw_rules:
        raise _err(where, "rule", "at least one [[rule]] is required")
    rules = tuple(_rule(r, i, where) for i, r in enumerate(raw_rules))
    names = [r.name for r in rules]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise _err(where, f"rule[{sorted(dup)[0]}]", "duplicate rule name")
    raw_ladder = data.get("ladder", [])
    if not isinstance(raw_ladder, list) or not raw_ladder:
        raise _err(where, "ladder", "at least one [[ladder]] rung is required")
    ladder: list[LadderStep] = []
    for i, rung in enumerate(raw_ladder):
        lk = f"ladder[{i}]"
        lt = _table(rung, where, lk)
        _only(lt, {"step", "timeout_s"}, where, lk)
        step = _enum(Action, lt.get("step"), where, f"{lk}.step")
        if not step.drains:
            raise _err(where, f"{lk}.step", "must be reset_gpu, reboot or inspect")
        if ladder and step <= ladder[-1].step:
            raise _err(where, f"{lk}.step", "rungs must go up (reset_gpu < reboot < inspect)")
        timeout = _num(lt, "timeout_s", 0.0, where, lk, lo=1.0) if "timeout_s" in lt else None
        ladder.append(LadderStep(step, timeout))
    lt = _table(data.get("lemon", {}), where, "lemon")
    _only(lt, {"drains", "days"}, where, "lemon")
    lemon = LemonConfig(drains=_int(lt, "drains", 3, where, "lemon", lo=1),
                        days=_num(lt, "days", 7.0, where, "lemon", lo=0.0))
    return Policy(rules=rules, ladder=tuple(ladder), dry_run=dry,
                  healthy_delay_s=_num(data, "healthy_delay_s", 600.0, where, ""),
                  stale_after_s=_num(data, "stale_after_s", 120.0, where, "", lo=1.0),
                  lemon=lemon, budget=_budget(data.get("budget", {}), where), source=where,
                  fleet_nodes=fleet)


def loads_policy(text: str, where: str = "<policy>") -> Policy:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}") from None
    return parse_policy(data, where)


#: tables whose keys are the site's data (a domain name → its cap): an overlay's replaces ours
_WHOLE = frozenset({"domain_caps"})


def merge_over(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: tables merge key by key (``domain_caps`` is replaced whole:
    its keys are the site's domains); anything else (a value, an array, the ``[[rule]]`` and
    ``[[ladder]]`` arrays of tables) replaces what ``base`` had."""
    out = dict(base)
    for k, v in over.items():
        old = out.get(k)
        if isinstance(old, Mapping) and isinstance(v, Mapping) and k not in _WHOLE:
            out[k] = merge_over(old, v)
        else:
            out[k] = v
    return out


def policy_data(path: str | Path | None = None) -> tuple[dict[str, Any], str]:
    """The policy as TOML data: the shipped default, with ``path`` (an overlay that sets only
    what it changes) merged over it; and where it came from."""
    default = resources.files("minutiae.controller").joinpath(DEFAULT_POLICY).read_text("utf-8")
    base = tomllib.loads(default)
    if path is None:
        return base, f"minutiae/controller/{DEFAULT_POLICY}"
    return merge_over(base, _read_toml(Path(path))), str(path)


def load_policy(path: str | Path | None = None) -> Policy:
    """The shipped default policy, with the file at ``path`` (when given) merged over it."""
    data, where = policy_data(path)
    return parse_policy(data, where)


def _read_toml(p: Path) -> dict[str, Any]:
    try:
        raw = read_bounded(p, limit=1 << 20, what="policy file")   # /dev/zero: one line
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read policy: {exc.strerror or exc}") from None
    except InputError as exc:
        raise ConfigError(f"cannot read policy: {exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: policy is not UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None

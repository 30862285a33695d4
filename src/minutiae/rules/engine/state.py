"""The engine's state, JSON-serialisable so one-shot ``minutiae check`` keeps rates, counts,
persistence timers and flap history across runs (see :mod:`minutiae.node.state_file`).

Per rule and key (a component such as ``ib:mlx5_0/1`` or ``gpu:0000:44:00.0``): the recent
samples ``(t, value)`` (bounded by the rule's window), whether the alarm is active and since
when, the start of the current bad/healthy stretch, and the alarm transition times.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from minutiae.errors import DataError

VERSION = 1
MAX_SAMPLES = 4096  # per key: bounds the state file whatever the window


@dataclass(slots=True)
class KeyState:
    """Mutable per-(rule, key) state."""

    samples: list[tuple[float, Any]] = field(default_factory=list)
    active: bool = False
    since: float | None = None
    bad_since: float | None = None
    good_since: float | None = None
    transitions: list[float] = field(default_factory=list)
    value: Any = None
    evidence: list[str] = field(default_factory=list)
    pci: str | None = None
    #: when the key last had a value to judge (a gap longer than the rule's ``max_gap_s``
    #: restarts the current bad/healthy stretch: persistence must be seen, not assumed)
    seen: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": [[t, v] for t, v in self.samples], "active": self.active,
            "since": self.since, "bad_since": self.bad_since, "good_since": self.good_since,
            "transitions": list(self.transitions), "value": self.value,
            "evidence": list(self.evidence), "pci": self.pci, "seen": self.seen,
        }

    @classmethod
    def from_json(cls, d: Any) -> KeyState:
        if not isinstance(d, dict):
            raise DataError("key state is not an object")
        samples = []
        for s in d.get("samples", []):
            if not (isinstance(s, list) and len(s) == 2 and _is_time(s[0])):
                raise DataError(f"bad sample {s!r}")
            samples.append((float(s[0]), s[1]))
        trans = [float(t) for t in d.get("transitions", []) if _is_time(t)]
        return cls(
            samples=samples[-MAX_SAMPLES:], active=bool(d.get("active", False)),
            since=_opt_time(d.get("since")), bad_since=_opt_time(d.get("bad_since")),
            good_since=_opt_time(d.get("good_since")), transitions=trans,
            value=d.get("value"), evidence=[str(e) for e in d.get("evidence", [])][-5:],
            pci=d.get("pci") if isinstance(d.get("pci"), str) else None,
            seen=_opt_time(d.get("seen")),
        )


def _is_time(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _opt_time(v: Any) -> float | None:
    return float(v) if _is_time(v) else None


@dataclass(slots=True)
class EngineState:
    """All rules' state plus the boot time it belongs to (a reboot resets finding counts)."""

    boot_time: float | None = None
    rules: dict[str, dict[str, KeyState]] = field(default_factory=dict)

    def key(self, rule_id: str, key: str) -> KeyState:
        per_rule = self.rules.setdefault(rule_id, {})
        ks = per_rule.get(key)
        if ks is None:
            ks = per_rule[key] = KeyState()
        return ks

    def to_dict(self) -> dict[str, Any]:
        """The state as plain JSON data (to embed in another document)."""
        return {
            "version": VERSION, "boot_time": self.boot_time,
            "rules": {r: {k: ks.to_json() for k, ks in keys.items()}
                      for r, keys in self.rules.items()},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False, default=str)

    @classmethod
    def from_json(cls, text: str | bytes) -> EngineState:
        """Parse a state file; any damage raises ``DataError`` (callers start fresh)."""
        try:
            d = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DataError(f"state is not JSON: {exc}") from exc
        except RecursionError:  # a hostile file nested thousands deep
            raise DataError("state is not JSON this engine writes: nested too deep") from None
        return cls.from_dict(d)

    @classmethod
    def from_dict(cls, d: Any) -> EngineState:
        """The inverse of :meth:`to_dict`; any damage raises ``DataError``."""
        if not isinstance(d, dict) or d.get("version") != VERSION:
            raise DataError("state has an unknown layout or version")
        rules_raw = d.get("rules", {})
        if not isinstance(rules_raw, dict):
            raise DataError("state 'rules' is not an object")
        rules: dict[str, dict[str, KeyState]] = {}
        for rid, keys in rules_raw.items():
            if not isinstance(keys, dict):
                raise DataError(f"state of rule {rid!r} is not an object")
            try:
                rules[str(rid)] = {str(k): KeyState.from_json(v) for k, v in keys.items()}
            except (TypeError, ValueError, AttributeError) as exc:
                raise DataError(f"state of rule {rid!r} is damaged: {exc}") from exc
        return cls(boot_time=_opt_time(d.get("boot_time")), rules=rules)

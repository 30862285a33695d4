"""Which truth classes a finding kind can explain: data, not code.

Each class of a fault profile (``sim/world/profiles/default.toml``) lists the finding kinds
(``kind`` or ``kind:code``, e.g. ``xid:79``) that explain it:

- ``explained_by``: the kinds meant to find this class; a false alarm of such a kind counts
  against this class's precision, so a kind is in at most one class's ``explained_by``;
- ``also_explained_by``: kinds that can explain it too (a straggler alarm on a node with a
  thermal throttle), whose false alarms count against the class that names them in
  ``explained_by``.

:class:`Explains` is the validated kind -> classes map (that class first) the scorer matches
alarms with. The simulator writes it into ``meta.json`` (``explains``) so that a dataset is
scored by its own profile; truth without it is scored by the packaged default profile's.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from minutiae.errors import ConfigError, DataError

#: the truth class a rollout with a performance effect writes
ROLLOUT_CLASS = "perf_regression"
KIND = re.compile(r"[a-z][a-z0-9_]*(:[0-9]+)?")
#: the packaged default profile (data of ``minutiae.sim.world``, read as a file, never imported)
DEFAULT_PROFILE = Path(__file__).resolve().parent.parent / "sim" / "world" / "profiles" / "default.toml"


@dataclass(frozen=True, slots=True)
class Explains:
    """``classes``: finding kind (``kind`` or ``kind:code``) -> the truth classes it can
    explain, the one its false alarms count against first."""

    classes: Mapping[str, tuple[str, ...]]

    def of(self, key: str, kind: str) -> tuple[str, ...]:
        """The classes an alarm of ``key`` (``kind:code``) explains; by its bare kind if the
        code is not listed."""
        return self.classes.get(key, self.classes.get(kind, ()))

    def to_json(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.classes.items()}

    @staticmethod
    def from_json(raw: Any, where: str) -> Explains:
        """The map as ``to_json`` wrote it (a dataset's ``meta.json``); ``DataError`` if malformed."""
        if not isinstance(raw, dict) or not all(
                isinstance(k, str) and KIND.fullmatch(k) and isinstance(v, list) and v
                and all(isinstance(c, str) and c for c in v) for k, v in raw.items()):
            raise DataError("explains must map finding kinds to non-empty lists of truth classes", where)
        return Explains({k: tuple(v) for k, v in raw.items()})


def _kinds(where: str, cls: str, key: str, raw: Any) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise ConfigError(f"{where} ({cls}): {key} must be a list of finding kinds")
    bad = [k for k in raw if not KIND.fullmatch(k)]
    if bad:
        raise ConfigError(f"{where} ({cls}): {key}: not a finding kind (kind or kind:code): {bad}")
    if len(set(raw)) != len(raw):
        raise ConfigError(f"{where} ({cls}): {key} lists a kind twice")
    return list(raw)


def build_explains(explained_by: Mapping[str, Any], also: Mapping[str, Any], where: str) -> Explains:
    """Validate per-class ``explained_by`` / ``also_explained_by`` lists (class -> kinds, in
    profile order) into the kind -> classes map; ``ConfigError`` naming ``where`` otherwise."""
    home: dict[str, str] = {}
    for cls, raw in explained_by.items():
        for k in _kinds(where, cls, "explained_by", raw):
            if k in home:
                raise ConfigError(f"{where} ({cls}): {k!r} is already in the explained_by of {home[k]!r} "
                                  "(a kind's false alarms count against one class: list it in "
                                  "also_explained_by here)")
            home[k] = cls
    others: dict[str, list[str]] = {}
    for cls, raw in also.items():
        for k in _kinds(where, cls, "also_explained_by", raw):
            if k not in home:
                raise ConfigError(f"{where} ({cls}): also_explained_by {k!r} is in no class's explained_by "
                                  "(its false alarms need a class to count against)")
            if home[k] == cls:
                raise ConfigError(f"{where} ({cls}): {k!r} is in both explained_by and also_explained_by")
            others.setdefault(k, []).append(cls)
    return Explains({k: (cls, *others.get(k, ())) for k, cls in home.items()})


def explains_of_classes(classes: Sequence[Mapping[str, Any]], where: str) -> Explains:
    """From profile entries (``class``, ``explained_by``, ``also_explained_by``), in order."""
    by = {str(c["class"]): c.get("explained_by", []) for c in classes}
    also = {str(c["class"]): c.get("also_explained_by", []) for c in classes}
    return build_explains(by, also, where)


def profile_classes(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A parsed profile's classes in order: ``[[fault]]``, ``[[benign]]``, then the class a
    rollout with an effect writes (``[rollouts]``: ``perf_regression``)."""
    out = [*doc.get("fault", []), *doc.get("benign", [])]
    ro = doc.get("rollouts")
    if isinstance(ro, dict):
        out.append({**ro, "class": ROLLOUT_CLASS})
    return [c for c in out if isinstance(c, dict) and "class" in c]


@cache
def default_explains() -> Explains:
    """The packaged default profile's map (for truth that does not carry its own)."""
    try:
        doc = tomllib.loads(DEFAULT_PROFILE.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{DEFAULT_PROFILE}: cannot read the default profile: {exc}") from None
    return explains_of_classes(profile_classes(doc), str(DEFAULT_PROFILE))

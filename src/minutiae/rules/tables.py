"""The part every rules-as-data loader shares: the ``[[rule]]`` tables of a parsed TOML document,
each with a unique id, only known keys and a kind (kernel-log, counter and engine rules)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from minutiae.errors import ConfigError

_ID = re.compile(r"[a-z0-9_.-]+")
_KIND = re.compile(r"[a-z][a-z0-9_]*")


def rule_tables(doc: Mapping[str, Any], where: str, keys: frozenset[str], *,
                required: bool = True) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(id, kind, table)`` for each ``[[rule]]`` table, validated; ConfigError names the file
    and the rule. ``required``: a document without rules is an error (else it has none)."""
    raw = doc.get("rule") if required else doc.get("rule", [])
    if not isinstance(raw, list) or (required and not raw):
        raise ConfigError(f"{where}: no [[rule]] tables" if required
                          else f"{where}: 'rule' must be an array of tables ([[rule]])")
    seen: set[str] = set()
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: rule #{i} is not a table")
        rid = item.get("id")
        if not isinstance(rid, str) or not _ID.fullmatch(rid):
            raise ConfigError(f"{where}: rule #{i}: id must match [a-z0-9_.-]+ (got {rid!r})")
        if rid in seen:
            raise ConfigError(f"{where}: rule {rid!r}: duplicate id")
        seen.add(rid)
        unknown = set(item) - keys
        if unknown:
            raise ConfigError(f"{where}: rule {rid!r}: unknown keys {sorted(unknown)}")
        kind = item.get("kind")
        if not isinstance(kind, str) or not _KIND.fullmatch(kind):
            raise ConfigError(f"{where}: rule {rid!r}: kind must be a lower-case identifier (got {kind!r})")
        yield rid, kind, item

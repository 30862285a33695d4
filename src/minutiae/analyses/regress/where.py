"""Small grammars for the regression commands (pure): tolerant version comparison, the
``--where`` filter of ``minutiae impact`` and the ``--since`` window.

``--where``: clauses joined by ``and`` or ``,``; each is ``ATTR OP VALUE`` with OP one of
``>= <= > < == = !=``. ATTR is a run attribute column (case-insensitive: ``NCCL`` is ``nccl``),
``signature`` or ``node``. Versions compare numerically part by part (``2.21.5 > 2.21``,
``570.158.01 > 570.86.16``, ``2.21.0rc1 < 2.21.0``); a run spread over nodes with several
versions matches only if every one of them does. A run missing the attribute never matches.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from minutiae.errors import ConfigError
from minutiae.history.record import RunRecord

_TOKEN = re.compile(r"\d+|[A-Za-z]+")
_CLAUSE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*(>=|<=|==|!=|=|>|<)\s*([^\s<>=!]\S*)\s*$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def version_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key: numbers as numbers, letters below numbers (so ``rc`` parts sort before release)."""
    parts: list[tuple[int, int | str]] = []
    for tok in _TOKEN.findall(text):
        parts.append((0, int(tok)) if tok.isdigit() else (-1, tok.lower()))
    while parts and parts[-1] == (0, 0):
        parts.pop()
    return tuple(parts)


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1 (``2.21`` == ``2.21.0``)."""
    ka, kb = list(version_key(a)), list(version_key(b))
    n = max(len(ka), len(kb))
    ka += [(0, 0)] * (n - len(ka))
    kb += [(0, 0)] * (n - len(kb))
    return (ka > kb) - (ka < kb)


_OPS: dict[str, Callable[[int], bool]] = {
    ">=": lambda c: c >= 0, "<=": lambda c: c <= 0, ">": lambda c: c > 0, "<": lambda c: c < 0,
    "==": lambda c: c == 0, "=": lambda c: c == 0, "!=": lambda c: c != 0,
}


@dataclass(frozen=True, slots=True)
class Clause:
    attr: str
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.attr}{self.op}{self.value}"


@dataclass(frozen=True, slots=True)
class Where:
    clauses: tuple[Clause, ...]

    def __str__(self) -> str:
        return " and ".join(map(str, self.clauses))

    def matches(self, run: RunRecord) -> bool | None:
        """True/False, or None when the run lacks an attribute a clause needs (unknown)."""
        for c in self.clauses:
            if c.attr == "signature":
                ok = _OPS[c.op](compare_versions(run.signature, c.value)) if c.op not in ("==", "=", "!=") \
                    else ((run.signature == c.value) == (c.op != "!="))
            elif c.attr == "node":
                if c.op not in ("==", "=", "!="):
                    raise ConfigError(f"--where: node takes == or != (got {c})")
                ok = (c.value in run.nodes) == (c.op != "!=")
            else:
                vals = run.attrs.get(c.attr)
                if not vals:
                    return None
                ok = all(_OPS[c.op](compare_versions(v, c.value)) for v in vals)
            if not ok:
                return False
        return True


def parse_where(text: str, known: Sequence[str]) -> Where:
    """Parse and validate ``--where`` against the attribute columns ``known``."""
    if not text or not text.strip():
        raise ConfigError("--where is empty; expected e.g. \"NCCL>=2.21\" or \"driver==570.158.01 and kernel<6\"")
    parts = [p for p in re.split(r"\s+and\s+|,", text.strip(), flags=re.IGNORECASE)]
    allowed = {k.lower() for k in known} | {"signature", "node"}
    clauses = []
    for part in parts:
        m = _CLAUSE.match(part)
        if not m:
            raise ConfigError(f"--where: cannot read {part.strip()!r}; expected ATTR OP VALUE with OP one of "
                              ">= <= > < == != (e.g. \"NCCL>=2.21\")")
        attr, op, value = m.group(1).lower(), m.group(2), m.group(3)
        if attr not in allowed:
            raise ConfigError(f"--where: unknown attribute {m.group(1)!r}; the history has: "
                              + ", ".join(sorted(allowed)))
        clauses.append(Clause(attr, op, value))
    return Where(tuple(clauses))


def parse_fraction(text: str) -> float:
    """``0.8%`` → 0.008, ``0.008`` → 0.008; must be within (-1, 1) and not zero."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise ConfigError(f"--speedup {text!r}: expected a percentage like 0.8% or a fraction like 0.008") from None
    if not (-1.0 < v < 1.0) or v == 0.0:
        raise ConfigError(f"--speedup {text!r}: must be non-zero and between -100% and 100%")
    return v


def parse_duration(text: str) -> float:
    """``14d`` → seconds (units s, m, h, d, w)."""
    m = _DURATION.match(text or "")
    if not m:
        raise ConfigError(f"--since {text!r}: expected a duration like 14d, 36h, 2w")
    return float(m.group(1)) * _UNITS[m.group(2)]

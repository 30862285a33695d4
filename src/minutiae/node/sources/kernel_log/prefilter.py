"""The kernel-log prefilter: one alternation of every rule's literal keywords, searched over
a whole block of lines at once (google-re2 over bytes when installed, the stdlib ``re``
otherwise); only the lines it hits are parsed. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from minutiae.rules.logs import LogRule, kernel_log_rules

try:  # google-re2: a linear-time DFA, ~10x faster than ``re`` for the keyword prefilter
    import re2 as _re2
except ImportError:  # pragma: no cover - exercised only without the wheel
    _re2 = None

BROADCAST = "Message from syslogd@"


def prefilter_patterns(rules: Sequence[LogRule] | None = None) -> list[str]:
    """The literal keywords the prefilter searches for (also what the benchmark gives grep)."""
    out: list[str] = []
    for r in kernel_log_rules() if rules is None else rules:
        for k in r.keywords:
            if k not in out:
                out.append(k)
    out.append(BROADCAST)
    return out


def compile_prefilter(words: Sequence[str]) -> Any:
    alternation = "|".join(re.escape(w) for w in words).encode()
    if _re2 is not None:
        try:
            return _re2.compile(alternation)
        except Exception:  # pragma: no cover - re2 refuses an escape: fall back  # noqa: S110
            pass
    return re.compile(alternation)


def matcher(prefilter: Any) -> tuple[Callable[[Any, bytes, int, int], list[tuple[int, int]]],
                                     Any]:
    """``(match, anchor)``: ``match(anchor, buf, pos, endpos)[0][0]`` is the offset of the next
    keyword hit in ``buf[pos:endpos]``, or -1 — re2's own ``Match`` when it is there (its Python
    wrapper costs ~5 µs a call, and even a Python function around ``Match`` costs more than the
    call itself: a dense log pays it per matching line, so the scan calls this directly)."""
    rx = getattr(prefilter, "_regexp", None)
    if rx is not None and _re2 is not None:
        return rx.Match, _re2._Anchor.UNANCHORED
    search = prefilter.search

    def match_re(_: Any, buf: bytes, pos: int, endpos: int) -> list[tuple[int, int]]:
        m = search(buf, pos, endpos)
        return [(-1, -1)] if m is None else [m.span()]
    return match_re, None

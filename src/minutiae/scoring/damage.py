"""Damage in a replayed dataset (pure): what a reader found missing, truncated or garbled, and
the node-window it makes UNKNOWN (issue 18 item 3: no missing data replayed as healthy).

Shared by the backtest and the sim eval readers (both sit above ``scoring``). The readers do the
I/O (``minutiae.inputs``) and hand the lines here:

* :func:`check_csv_lines`: the rows of a CSV up to the first damaged one (a row with the wrong
  number of fields, a time that is not a number, bytes that are not UTF-8, or a last row without
  its newline: a file cut mid-row), and a :class:`Damage` naming the line and the last good time;
* :func:`last_line_time`: the time of a kernel log's last complete line (where a cut log's
  UNKNOWN window starts).

A ``fatal`` :class:`Damage` hits a file the whole replay depends on (fleet.csv,
maintenance.csv, jobs.csv; for eval also boots.csv, runs.csv, telemetry.parquet): the command
refuses it (exit 3) unless ``--allow-damaged`` is given, and then every node it affects
(``scope``; None: all) is UNKNOWN.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

__all__ = ["Damage", "Harm", "check_csv_lines", "cut_short", "last_line_time", "unknown_from"]


class Harm(Enum):
    MISSING = "missing"
    TRUNCATED = "truncated"
    GARBLED = "garbled"
    ENDS_EARLY = "ends early"
    UNLISTED = "not listed"
    UNREADABLE = "unreadable"


@dataclass(frozen=True, slots=True)
class Damage:
    """One damaged input: ``path`` (relative to the dataset), ``node`` (None: a file the whole
    replay depends on; it affects the nodes in ``scope``, None: every node), the UNKNOWN window ``since`` … ``until`` (None: to the end), ``line`` (the
    first damaged line, 1-based, header included) and ``detail`` (what was wrong)."""

    path: str
    harm: Harm
    since: float
    node: str | None = None
    line: int | None = None
    detail: str = ""
    until: float | None = None
    scope: tuple[str, ...] | None = None
    #: a file the whole replay depends on: refused unless ``--allow-damaged``
    fatal: bool = False

    def affects(self, node: str | None) -> bool:
        if self.node is not None:
            return self.node == node
        return self.scope is None or node in self.scope

    def covers(self, node: str | None, t: float) -> bool:
        return self.affects(node) and t >= self.since and (self.until is None or t <= self.until)

    def who(self) -> str:
        if self.node is not None:
            return self.node
        if self.scope is None:
            return "all nodes"
        more = f" +{len(self.scope) - 3}" if len(self.scope) > 3 else ""
        return f"{len(self.scope)} node(s) ({', '.join(self.scope[:3])}{more})"

    def message(self) -> str:
        where = f" at line {self.line:,}" if self.line is not None else ""
        what = f"{self.path} {self.harm.value}{where}"
        if self.detail:
            what += f" ({self.detail})"
        to = _when(self.until) if self.until is not None else "end"
        return f"{self.who()}: {what}: UNKNOWN from {_when(self.since)} to {to}"

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "harm": self.harm.value, "node": self.node,
                "scope": list(self.scope) if self.scope is not None else None, "line": self.line,
                "detail": self.detail, "since": self.since, "until": self.until, "fatal": self.fatal,
                "message": self.message()}


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _cells(raw: bytes) -> tuple[list[str] | None, str]:
    """One CSV line's fields, or None and why it is not a CSV line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 at byte {exc.start}"
    if text.endswith("\r"):  # CRLF: the csv module's own line ending
        text = text[:-1]
    if "\0" in text:
        return None, "NUL bytes"
    if '"' in text or "\r" in text:
        try:
            return next(csv.reader([text]), []), ""
        except csv.Error as exc:
            return None, f"bad CSV: {exc}"
    return (text.split(",") if text else []), ""  # the common case, without csv's per-line cost


def _bad_row(raw: bytes, width: int, time_index: int | None, time_name: str = "time"
             ) -> tuple[list[str] | None, str]:
    cells, why = _cells(raw)
    if cells is None:
        return None, why
    if len(cells) != width:
        return None, f"{len(cells)} of {width} fields"
    if time_index is not None:
        try:
            float(cells[time_index])
        except ValueError:
            return None, f"{time_name} {cells[time_index][:20]!r} is not a number"
    return cells, ""


def check_csv_lines(lines: Iterable[bytes], *, ends_with_newline: bool, path: str,
                    required: Sequence[str], time_column: str | None, start: float,
                    node: str | None = None) -> tuple[list[dict[str, str]], Damage | None]:
    """The rows before the first damaged line, and the damage (None when the file is whole).

    The UNKNOWN window starts at the last good row's time, or at ``start`` (the dataset's) when
    no good row has a time or the rows are not in time order (the lost ones may be of any time).
    A header without a ``required`` column damages the whole file (line 1)."""
    it = iter(lines)
    head = next(it, None)
    if head is None:
        return [], Damage(path, Harm.TRUNCATED, start, node, 1, "empty: no header")
    cols, why = _cells(head)
    missing = [c for c in required if cols is None or c not in cols]
    if cols is None or missing:
        return [], Damage(path, Harm.GARBLED, start, node, 1,
                          why or f"missing column(s) {', '.join(missing)}")
    ti = cols.index(time_column) if time_column in cols else None
    rows: list[dict[str, str]] = []
    last_t = start
    ordered = True
    prev: bytes | None = None
    n = 1
    for raw in it:
        if prev is not None:
            n += 1
            cells, why = _bad_row(prev, len(cols), ti, time_column or "")
            if cells is None:
                return rows, Damage(path, Harm.GARBLED, last_t if ordered else start, node, n, why)
            rows.append(dict(zip(cols, cells, strict=True)))
            if ti is not None:
                t = float(cells[ti])
                # rows out of time order: the lost ones may be of any time, so the window
                # starts at the start (nothing after the cut is known)
                ordered = ordered and t >= last_t
                last_t = max(last_t, t)
        prev = raw
    if prev is not None:
        n += 1
        cells, why = _bad_row(prev, len(cols), ti, time_column or "")
        if not ends_with_newline or cells is None:
            what = "cut mid-row" if not ends_with_newline else why
            return rows, Damage(path, Harm.TRUNCATED if not ends_with_newline else Harm.GARBLED,
                                last_t if ordered else start, node, n, what)
        rows.append(dict(zip(cols, cells, strict=True)))
    return rows, None


def cut_short(path: str, rows: Sequence[dict[str, str]], *, time_column: str | None, start: float,
              node: str | None, missing: int) -> Damage:
    """A CSV whose rows are all whole but which is ``missing`` bytes shorter than it was
    written (``manifest.json``): cut at a row boundary. UNKNOWN from its last row's time when
    the rows are in time order, else from ``start`` (the lost rows may be of any time)."""
    ts = [float(r[time_column]) for r in rows] if time_column else []
    ordered = all(a <= b for a, b in zip(ts, ts[1:], strict=False))
    since = max(start, ts[-1]) if ts and ordered else start
    return Damage(path, Harm.TRUNCATED, since, node, len(rows) + 2,
                  f"cut at a row boundary: {missing:,} bytes shorter than written (manifest.json)")


def last_line_time(lines: Iterable[bytes], year: int | None) -> tuple[float | None, int]:
    """The latest time stamped on any complete line of a kernel log, and its line count."""
    from minutiae.node.sources.kernel_log.parse_prefix import split_prefix

    latest: float | None = None
    n = 0
    for raw in lines:
        n += 1
        p = split_prefix(raw.decode("utf-8", "replace"), year=year)
        if p.time is not None:
            t = p.time.timestamp()
            latest = t if latest is None else max(latest, t)
    return latest, n


def unknown_from(damage: Iterable[Damage], node: str) -> float | None:
    """The earliest time from which ``node`` is UNKNOWN to the end (None: never)."""
    ts = [d.since for d in damage if d.until is None and d.affects(node)]
    return min(ts) if ts else None

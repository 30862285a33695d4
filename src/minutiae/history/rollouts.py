"""Pure parsers for ``rollouts.csv`` (``time,node,attr,old,new``) and ``fleet.csv`` (``node`` plus
one column per attribute, the state at the start) of docs/dataset.md, and the grouping of per-node
changes into rollouts (one attribute moving from one version to another on a set of nodes)."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from minutiae.errors import DataError, ParseError
from minutiae.history.issues import HistoryIssue, IssueKind
from minutiae.history.parse import parse_time


@dataclass(frozen=True, slots=True)
class NodeChange:
    """One node's attribute changed from ``old`` to ``new`` at ``time``."""

    time: float
    node: str
    attr: str
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class Rollout:
    """``attr`` moved ``old`` → ``new`` on ``nodes`` between ``start`` and ``end`` (epoch s);
    ``at`` maps each node to its change time."""

    attr: str
    old: str
    new: str
    start: float
    end: float
    at: Mapping[str, float]

    @property
    def name(self) -> str:
        return f"{self.attr} {self.old or '?'} → {self.new}"

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self.at)


def _read(text: str, where: str, need: Sequence[str]) -> list[dict[str, str]]:
    if "\x00" in text:
        raise ParseError("binary data (NUL bytes), not a CSV", where)
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in need if c not in header]
        if missing:
            raise DataError(f"missing column(s) {', '.join(missing)}; header is {', '.join(header) or '(empty)'}",
                            where)
        return [{(k or "").strip(): (v if isinstance(v, str) else "").strip() for k, v in row.items()}
                for row in reader]
    except csv.Error as exc:
        raise ParseError(f"not a CSV: {exc}", where) from None


def parse_rollouts_csv(text: str, where: str) -> tuple[list[NodeChange], list[HistoryIssue]]:
    rows = _read(text, where, ("time", "node", "attr", "new"))
    out: list[NodeChange] = []
    issues: list[HistoryIssue] = []
    for i, row in enumerate(rows):
        try:
            if not row.get("node") or not row.get("attr") or not row.get("new"):
                raise ValueError("empty node, attr or new")
            out.append(NodeChange(parse_time(row.get("time", "")), row["node"], row["attr"].lower(),
                                  row.get("old", ""), row["new"]))
        except ValueError as exc:
            issues.append(HistoryIssue(IssueKind.BAD_ROW, f"{where}:{i + 2}: {exc}; row skipped"))
    return sorted(out, key=lambda c: c.time), issues


def parse_fleet_csv(text: str, where: str) -> dict[str, dict[str, str]]:
    """node → {attr: version} at the start of the history."""
    rows = _read(text, where, ("node",))
    return {r["node"]: {k.lower(): v for k, v in r.items() if k and k != "node" and v}
            for r in rows if r.get("node")}


def group_rollouts(changes: Sequence[NodeChange]) -> list[Rollout]:
    """One rollout per (attr, old, new); a node's last change of that kind wins."""
    groups: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    for c in changes:
        groups[(c.attr, c.old, c.new)][c.node] = c.time
    out = [Rollout(attr, old, new, min(at.values()), max(at.values()), dict(at))
           for (attr, old, new), at in groups.items()]
    return sorted(out, key=lambda r: (r.start, r.attr, r.new))

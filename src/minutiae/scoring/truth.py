"""Ground truth of a simulated fleet: one ``TruthEvent`` per injected fault (``truth.jsonl``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minutiae.errors import DataError, ParseError


@dataclass(frozen=True, slots=True)
class TruthEvent:
    """One injected fault (``harmful=True``) or one thing that must not alarm (``harmful=False``).

    ``node`` is None for job-wide or fleet-wide effects; then ``details["nodes"]`` lists the
    nodes it covers, or ``details["scope"] == "fleet"`` means every node. ``signature`` lists the
    data that should reveal it (``kern.log``, ``ib``, ``telemetry``, ``timings``, ``runs``).
    """

    id: str
    cls: str
    node: str | None
    component: str | None
    start: float
    end: float
    severity: str
    expect_drain: bool
    signature: tuple[str, ...]
    harmful: bool = True
    details: Mapping[str, Any] = field(default_factory=dict)

    def covers(self, node: str) -> bool:
        if self.node is not None:
            return self.node == node
        if self.details.get("scope") == "fleet":
            return True
        return node in self.details.get("nodes", ())

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "class": self.cls, "node": self.node, "component": self.component,
            "start": round(self.start, 3), "end": round(self.end, 3), "severity": self.severity,
            "expect_drain": self.expect_drain, "signature": list(self.signature),
            "harmful": self.harmful, "details": dict(self.details),
        }

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> TruthEvent:
        return TruthEvent(
            id=str(obj["id"]), cls=str(obj["class"]), node=obj.get("node"),
            component=obj.get("component"), start=float(obj["start"]), end=float(obj["end"]),
            severity=str(obj.get("severity", "warning")), expect_drain=bool(obj.get("expect_drain")),
            signature=tuple(obj.get("signature", ())), harmful=bool(obj.get("harmful", True)),
            details=dict(obj.get("details") or {}),
        )


def write_truth(path: Path, events: Iterable[TruthEvent]) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for ev in events:
            fh.write(json.dumps(ev.to_json(), sort_keys=True) + "\n")
            n += 1
    return n


def parse_truth_lines(lines: Iterable[str], where: str) -> Iterator[TruthEvent]:
    """Parse truth.jsonl lines (pure); a bad line raises ParseError naming ``where:line``."""
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise TypeError("not an object")
            yield TruthEvent.from_json(obj)
        except (ValueError, TypeError, KeyError) as exc:
            raise ParseError(f"line {no}: not a truth record ({exc})", where) from None


def read_truth(path: Path) -> list[TruthEvent]:
    if not path.is_file():
        raise DataError("missing truth.jsonl (not a minutiae sim dataset?)", str(path))
    try:
        with path.open("r", encoding="utf-8") as fh:
            return list(parse_truth_lines(fh, str(path)))
    except UnicodeDecodeError as exc:
        raise ParseError(f"not UTF-8 text ({exc})", str(path)) from None

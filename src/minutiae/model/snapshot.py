"""What every node parser returns: observations plus the problems met while reading.

A ``Problem`` is something that could not be read or understood (a missing counter, a
non-numeric value, a truncated capture). Checks built on a snapshot with problems never report
OK for what the problem covers: they report UNKNOWN and name ``where`` (a path, URL or field).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from minutiae.model import Observation
from minutiae.model.findings import Scalar


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing that could not be read: ``where`` is the path/URL/field, ``message`` says why."""

    component: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


#: metrics a parser derives from the values it read (not counted as values read)
DERIVED_METRICS = frozenset({"fabric_port", "ib_ports", "ib_active_ports"})


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Observations of one source at one time, and the problems met reading it."""

    source: str
    observations: tuple[Observation, ...] = ()
    problems: tuple[Problem, ...] = ()

    def __iter__(self) -> Iterator[Observation]:
        return iter(self.observations)

    def value(self, component: str, metric: str) -> Scalar:
        """The value of ``metric`` on ``component`` (None when not observed)."""
        for o in self.observations:
            if o.component == component and o.metric == metric:
                return o.value
        return None

    def components(self, prefix: str = "") -> list[str]:
        """Distinct components (in first-seen order) starting with ``prefix``."""
        seen: dict[str, None] = {}
        for o in self.observations:
            if o.component.startswith(prefix):
                seen.setdefault(o.component, None)
        return list(seen)

    def merged(self, other: Snapshot, source: str | None = None) -> Snapshot:
        return Snapshot(
            source or self.source,
            self.observations + other.observations,
            self.problems + other.problems,
        )


class SnapshotBuilder:
    """Collects observations/problems for one source (used inside parsers)."""

    def __init__(self, source: str, time: float | None = None) -> None:
        self.source = source
        self.time = time
        self._obs: list[Observation] = []
        self._problems: list[Problem] = []

    def add(self, component: str, metric: str, value: Scalar) -> None:
        self._obs.append(Observation(self.source, component, metric, value, self.time))

    def problem(self, component: str, where: str, message: str) -> None:
        self._problems.append(Problem(component, where, message))

    def extend(self, observations: Iterable[Observation]) -> None:
        self._obs.extend(observations)

    def build(self) -> Snapshot:
        return Snapshot(self.source, tuple(self._obs), tuple(self._problems))


def to_int(text: str) -> int | None:
    """A decimal or 0x-hex integer, or None (N/A, empty, garbage)."""
    t = text.strip()
    try:
        return int(t, 16) if t[:2].lower() == "0x" else int(t)
    except ValueError:
        return None


_NUM = re.compile(r"^[+-]?\d+(?:\.\d+)?")


def leading_number(text: str) -> float | None:
    """The number at the start of ``'67.03 W'``, ``'27 C'``, ``'16x'``; None for N/A/garbage."""
    m = _NUM.match(text.strip())
    return float(m.group(0)) if m else None

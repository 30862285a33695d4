"""The line-reader seam every non-vectorised format implements (pure)."""

from __future__ import annotations

from typing import ClassVar

from minutiae.analyses.stragglers.formats.types import Evidence, Rows

NUM = r"([-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?\d+)?)"
_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "min": 60.0}


def seconds(value: str, unit: str) -> float:
    return float(value) * _UNIT.get(unit, 1.0)


def number(text: str) -> float:
    """``6,922`` / ``1.2K`` / ``3.1M`` as printed by frameworks."""
    t = text.replace(",", "").strip()
    scale = {"K": 1e3, "M": 1e6, "B": 1e9}.get(t[-1:], 1.0)
    return float(t[:-1] if scale != 1.0 else t) * scale


class LineReader:
    """One format's reader over prefix-stripped lines. ``feed`` returns True when the line was
    one of this format's records (read, or counted in ``bad`` when it could not be); ``totals``
    holds whole-run figures a format prints once (HF ``train_runtime``, profiler means)."""

    name: ClassVar[str] = ""
    #: what to tell a user whose log of this format has no per-rank times
    advice: ClassVar[str] = "it has the job's step times only (one rank)"
    #: words one of which every record line contains (a cheap test before the regexes)
    signs: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self.rows = Rows()
        self.bad: list[tuple[int, str]] = []
        self.totals: dict[str, float] = {}
        self.seen = 0
        self.where = ""

    def wants(self, line: str) -> bool:
        return any(s in line for s in self.signs)

    def feed(self, no: int, rank: int | None, line: str) -> bool:
        raise NotImplementedError

    def finish(self) -> None:
        """Called after the last line of a file (readers that buffer emit their rows here)."""

    def step(self, step: int, rank: int | None, no: int, *, seconds: float | None = None,
             tokens: float | None = None, samples: float | None = None,
             tflops: float | None = None, mfu: float | None = None) -> None:
        self.rows.steps.append((step, rank, seconds, tokens, samples, tflops, mfu, no, self.name))
        self.seen += 1

    def evidence(self, rank: int, step: int | None, value: float, spread: float | None,
                 line: str, no: int) -> None:
        self.rows.evidence.append(Evidence(self.name, rank, step, value, spread, line,
                                           f"{self.where}:{no}"))
        self.seen += 1

    def fail(self, no: int, reason: str) -> bool:
        self.bad.append((no, reason))
        return True


"""StepTimer overhead per call (goal: <= 2 us): section enter+exit and step enter+exit, net of
an empty ``with nullcontext()`` measured in the same process, medians of repeats, with the
machine load; the old recorder's cost (one appended row per section exit) is emulated beside it.

    .venv/bin/python bench/timing/run.py [--calls 200000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from minutiae.timing import StepTimer  # noqa: E402


class _OldSection:
    """What a section exit cost before sums: one tuple appended per exit."""

    __slots__ = ("buf", "t0")

    def __init__(self, buf: list[tuple[int, str, float, float]]) -> None:
        self.buf, self.t0 = buf, 0.0

    def __enter__(self) -> _OldSection:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.buf.append((0, "forward", time.perf_counter() - self.t0, 0.0))


def _per_call(make: Callable[[], contextlib.AbstractContextManager[object]], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        with make():
            pass
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        timer = StepTimer(Path(d) / "r{rank}.csv", rank=0, node="n", gpu=0, flush_steps=10**9)
        null = contextlib.nullcontext()
        old_buf: list[tuple[int, str, float, float]] = []
        old = _OldSection(old_buf)
        cases: dict[str, Callable[[], contextlib.AbstractContextManager[object]]] = {
            "nullcontext (baseline)": lambda: null,
            "old recorder: append per exit": lambda: old,
            "timer.section(name) (sums)": lambda: timer.section("forward"),
            "timer.step(n)": lambda: timer.step(1),
        }
        loads = []
        res: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(a.repeats):
            loads.append(os.getloadavg()[0])
            for k, f in cases.items():
                res[k].append(_per_call(f, a.calls))
            old_buf.clear()
            timer._buf.clear()
        timer.close()
    base = statistics.median(res["nullcontext (baseline)"])
    print(f"StepTimer overhead, {a.calls:,} calls x {a.repeats} repeats, load "
          f"{min(loads):.1f}-{max(loads):.1f} (1-min avg while measuring)")
    print(f"{'case':34} {'median us/call':>15} {'net of baseline':>16} {'x baseline':>11}")
    for k, v in res.items():
        m = statistics.median(v)
        print(f"{k:34} {m * 1e6:15.3f} {(m - base) * 1e6:16.3f} {m / base:11.2f}")
    net = {k: statistics.median(v) - base for k, v in res.items()}
    ok = net["timer.section(name) (sums)"] <= 2e-6 and net["timer.step(n)"] <= 2e-6
    print(f"goal <= 2 us per call net: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()

"""The simulator's entry points used by the CLI (``sim``, ``demo``): option parsing and the
sim → dataset pipeline, so the click commands stay thin."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from minutiae.errors import ConfigError
from minutiae.sim.emit.writer import Progress, write_dataset
from minutiae.sim.world.plan import make_plan
from minutiae.sim.world.profile import load_profile

DEFAULT_START = "2025-01-06T00:00:00Z"
#: the demo accelerates the literature rates so that a 3-day, 128-node fleet shows faults
DEMO_RATE_SCALE = 20.0


def parse_rates(items: tuple[str, ...] | list[str]) -> dict[str, float]:
    """``["gpu_off_bus=0.5", ...]`` → ``{"gpu_off_bus": 0.5}``; bad items raise ConfigError."""
    out: dict[str, float] = {}
    for item in items:
        cls, sep, val = item.partition("=")
        try:
            if not sep or not cls.strip():
                raise ValueError
            out[cls.strip()] = float(val)
        except ValueError:
            raise ConfigError(f"--rate {item!r}: expected CLASS=NUMBER (e.g. gpu_off_bus=0.1)") from None
    return out


def parse_start(text: str) -> float:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--start {text!r}: expected an ISO time such as {DEFAULT_START}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


@dataclass(frozen=True, slots=True)
class SimSummary:
    out: Path
    nodes: int
    gpus_per_node: int
    days: float
    seed: int
    profile: str
    faults: int
    benign: int
    counts: dict[str, int]


def run_sim(out: Path, *, nodes: int, gpus_per_node: int, days: float, seed: int,
            profile: Path | None = None, rate_scale: float = 1.0, rates: dict[str, float] | None = None,
            start: str = DEFAULT_START, progress: Progress | None = None,
            noise_scale: float | None = None) -> SimSummary:
    if nodes < 1 or not 1 <= gpus_per_node <= 16 or days <= 0:
        raise ConfigError("need --nodes >= 1, 1 <= --gpus-per-node <= 16 and --days > 0")
    # the must-not-alarm events scale with the faults unless told otherwise: a dataset with x20
    # the faults and x1 the noise would overstate precision (docs/sim.md)
    noise = rate_scale if noise_scale is None else noise_scale
    prof = load_profile(profile, rate_scale=rate_scale, noise_scale=noise, rates=rates)
    plan = make_plan(prof, nodes, gpus_per_node, days, seed, parse_start(start))
    counts = write_dataset(plan, out, progress) if progress else write_dataset(plan, out)
    return SimSummary(out, nodes, gpus_per_node, days, seed, prof.name,
                      sum(1 for t in plan.truth if t.harmful), sum(1 for t in plan.truth if not t.harmful),
                      counts)

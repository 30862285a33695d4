"""The simulator's InfiniBand link-down fault looks like a failed link on a real node:
DOWN / Polling (the port keeps training, as in GPUd's H100 ibstat capture with ports down),
not Disabled, which is a port switched off by software and never a drain (docs/check.md)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from minutiae.scoring.truth import TruthEvent
from minutiae.sim.emit.ib import simulate_ib, write_ib_csv

REAL = "infiniband/gpud/ibstat.47.0.h100.some.down.with.polling.1"  # ../shared/realdata


def _states_during(cls: str) -> set[tuple[str, str]]:
    times = np.arange(0.0, 3600.0, 60.0)
    ev = TruthEvent(id="f1", cls=cls, node="gpu001", component="ib:3", start=600.0, end=1800.0,
                    severity="critical", expect_drain=True, signature=("ib",),
                    details={"gpu": 3})
    s = simulate_ib(times, 8, [ev], [], 0.0, np.ones((len(times), 8)), np.random.default_rng(1))
    fh = io.StringIO()
    write_ib_csv(fh, s, "400 Gb/sec (4X NDR)", "200 Gb/sec (4X NDR)")
    rows = [r.split(",") for r in fh.getvalue().splitlines()]
    assert len({r[1] for r in rows}) == 8
    return {(r[3], r[4]) for r in rows if 600 <= float(r[0]) < 1800 and r[3] in ("state", "phys_state")}


def test_link_down_is_down_and_polling_as_on_a_real_node(realdata: Path) -> None:
    real = (realdata / REAL).read_text()
    assert "State: Down" in real and "Physical state: Polling" in real
    got = _states_during("ib_link_down")
    assert ("state", "1: DOWN") in got
    assert ("phys_state", "2: Polling") in got
    assert ("phys_state", "3: Disabled") not in got

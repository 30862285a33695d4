"""A run history that records a value per run (an experiment tracker's git sha, a run's own id)
must not take a rollout's estimate away: such a field is neither a level of the fit (every run
would be its own baseline, every rollout "untestable") nor a grouping (more than 12 values)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from minutiae.analyses.whatchanged.groups import groupings
from minutiae.analyses.whatchanged.rollouts import attribute_rollouts
from minutiae.history.record import RunRecord
from minutiae.history.rollouts import NodeChange, group_rollouts

DAY = 86400.0
T0 = 1_780_000_000.0


def _fleet(seed: int, per_run: str | None) -> tuple[list[RunRecord], list[NodeChange]]:
    """16 nodes get NCCL 2.22.3 over days 20-30 (+3 %); 8 signatures, 150 runs each, 1 % noise."""
    rng = np.random.default_rng(seed)
    at = {f"n{i:02d}": T0 + float(rng.uniform(20, 30)) * DAY for i in range(16)}
    changes = [NodeChange(t, n, "nccl", "2.20.3", "2.22.3") for n, t in sorted(at.items())]
    runs = []
    for s in range(8):
        base = math.log(float(rng.uniform(0.5, 3.0)))
        for j in range(150):
            t = T0 + float(rng.uniform(0, 42)) * DAY
            node = f"n{int(rng.integers(16)):02d}"
            new = at[node] <= t
            y = base + float(rng.normal(0, 0.01)) + math.log1p(0.03) * new
            attrs = {"nccl": frozenset({"2.22.3" if new else "2.20.3"})}
            if per_run is not None:
                attrs[per_run] = frozenset({f"{s:02x}{j:038x}"})
            runs.append(RunRecord(f"m{s}-{j}", t, f"m{s}", math.exp(y), nodes=(node,),
                                  attrs=attrs, gpus=8, duration_s=3600.0))
    return runs, changes


@pytest.mark.parametrize("per_run", [None, "git_sha", "commit", "code_version"])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_per_run_value_leaves_the_rollout_testable(seed: int, per_run: str | None) -> None:
    runs, changes = _fleet(seed, per_run)
    v = attribute_rollouts(runs, group_rollouts(changes))[0]
    assert v.effect is not None and v.cause, v.summary()
    assert abs(v.effect.change - 0.03) < 0.006, v.summary()
    if per_run is not None:
        assert per_run not in groupings(runs)

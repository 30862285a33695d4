"""The telemetry detector reads telemetry.parquet in record batches; a node whose rows continue
in the next batch must be judged once, whole. Cut at a batch boundary, the boundary sample
showed half the node's GPUs and the node-level rule drained it for 'GPU(s) missing' (15 wrong
drains on the 1,024-node week)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.sim.eval.detectors.telemetry import _node_runs


def _rows(nodes: int, samples: int, gpus: int) -> pa.Table:
    node = [f"gpu{n:03d}" for n in range(nodes) for _ in range(samples * gpus)]
    time = [float(t) for _ in range(nodes) for t in range(samples) for _ in range(gpus)]
    gpu = [g for _ in range(nodes) for _ in range(samples) for g in range(gpus)]
    return pa.table({"time": time, "node": node, "gpu": gpu})


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(1, 8), st.integers(1, 40))
def test_every_node_comes_once_and_whole_whatever_the_batch_size(nodes: int, samples: int, gpus: int,
                                                                 size: int) -> None:
    tab = _rows(nodes, samples, gpus)
    got = list(_node_runs(tab.to_batches(max_chunksize=size), ["time", "node", "gpu"]))
    assert [n for n, _ in got] == [f"gpu{n:03d}" for n in range(nodes)]
    for _, arrs in got:
        assert len(arrs["time"]) == samples * gpus
        assert np.array_equal(np.bincount(arrs["gpu"].astype(int), minlength=gpus), np.full(gpus, samples))

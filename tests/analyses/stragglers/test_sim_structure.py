"""The simulator's timing model can make the structure of real jobs (issue 13): off by default
(the demo is unchanged), and when on the same physical GPU keeps its offset in every job."""

from __future__ import annotations

import numpy as np

from minutiae.sim.emit.timings import structure
from minutiae.sim.world.plan import Job

ON = {"lottery_sd": 0.01, "wander_phi": 0.9, "wander_sd": 0.008, "node_shared_sd": 0.01}


def _job(job_id: str, nodes: tuple[str, ...]) -> Job:
    return Job(job_id, 0.0, 3600.0, nodes, "sig", 1.0, "completed")


def test_off_by_default_is_exactly_one() -> None:
    f = structure(_job("1", ("a", "b")), 8, 50, {})
    assert f.shape == (50, 16) and (f == 1.0).all()


def test_lottery_follows_the_gpu_and_wander_is_autocorrelated() -> None:
    a = np.log(structure(_job("1", ("gpu001", "gpu002")), 8, 400, ON))
    b = np.log(structure(_job("2", ("gpu002", "gpu003")), 8, 400, ON))
    # gpu002's 8 GPUs: the same offsets in both jobs (ranks 8-15 in job 1, 0-7 in job 2)
    assert np.corrcoef(a[:, 8:].mean(axis=0), b[:, :8].mean(axis=0))[0, 1] > 0.8
    x = a - a.mean(axis=0)
    lag1 = float((x[1:] * x[:-1]).sum() / (x * x).sum())
    # wander (phi 0.9, var 0.64) diluted by the i.i.d. node-shared part (var 1): ~0.35
    assert 0.2 < lag1 < 0.5
    # node-shared noise: a node's GPUs move together step to step
    d = np.diff(a, axis=0)
    assert np.corrcoef(d[:, 0], d[:, 1])[0, 1] > 0.3 > abs(np.corrcoef(d[:, 0], d[:, 8])[0, 1])

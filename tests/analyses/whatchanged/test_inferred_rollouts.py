"""Rollouts inferred from the runs' software columns (``rollouts.infer_rollouts``): the versions
training logs print (torch, DeepSpeed, the CUDA driver) are rollouts like NCCL's; a config column
is not."""

from __future__ import annotations

from minutiae.analyses.whatchanged.rollouts import infer_rollouts
from minutiae.history.record import RunRecord


def _run(i: int, **attrs: str) -> RunRecord:
    return RunRecord(run_id=f"r{i}", time=1.7e9 + 3600 * i, signature="llama", value=2.5,
                     attrs={k: frozenset({v}) for k, v in attrs.items()})


def test_versions_from_training_logs_are_rollouts_and_config_is_not() -> None:
    runs = [_run(i, torch="2.4.0", deepspeed="0.14.0", cuda_driver="12.4", nccl="2.21.5",
                 micro_batch="4") for i in range(3)]
    runs += [_run(i, torch="2.5.1", deepspeed="0.14.0", cuda_driver="13.0", nccl="2.21.5",
                  micro_batch="8") for i in range(3, 6)]
    got = {(r.attr, r.old, r.new, r.start) for r in infer_rollouts(runs)}
    t = 1.7e9 + 3600 * 3
    assert got == {("torch", "2.4.0", "2.5.1", t), ("cuda_driver", "12.4", "13.0", t)}

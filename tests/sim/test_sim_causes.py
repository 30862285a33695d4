"""eval's straggler false alarms by cause (``sim/eval/causes.py``): the benign truth that names
the alarm's own GPU first, then its node, then the job; several job-long classes alike are
``job-wide noise``; a true alarm is not counted; and the scorecard shows the table."""

from __future__ import annotations

from minutiae.scoring.score import Detection, ScoreParams
from minutiae.scoring.truth import TruthEvent
from minutiae.sim.eval.causes import JOB_WIDE, straggler_causes

T0 = 1_736_000_000.0
H = 3600.0


def _benign(cls: str, node: str | None, comp: str | None, start: float, end: float,
            **details: object) -> TruthEvent:
    return TruthEvent("", cls, node, comp, start, end, "info", False, ("timings",), False,
                      details)


def _alarm(node: str, gpu: int, t: float) -> Detection:
    return Detection("stragglers", node, t, "straggler",
                     reason=f"gpu:{node}/{gpu} +4.0% slower since step 0")


JOB = {"job_id": "9", "nodes": ["n1", "n2"]}
TRUTH = [
    _benign("gpu_lottery", "n1", "gpu:3", T0, T0 + 10 * H, job_id="9", gpu=3),
    _benign("gpu_wander", "n1", "gpu:5", T0 + H, T0 + 1.2 * H, job_id="9", gpu=5),
    _benign("node_shared_noise", None, "job:9", T0, T0 + 10 * H, **JOB),
    _benign("rank_noise_tails", None, "job:9", T0, T0 + 10 * H, **JOB),
    _benign("job_restart", None, "job:9", T0 + 5 * H, T0 + 6 * H, **JOB),
    _benign("moe_hot_expert", None, "job:8", T0 + 20 * H, T0 + 28 * H, job_id="8", nodes=["n3"]),
    _benign("rank_noise_tails", None, "job:8", T0 + 20 * H, T0 + 28 * H, job_id="8", nodes=["n3"]),
    TruthEvent("f1", "persistent_straggler", "n2", "gpu:1", T0 + 7 * H, T0 + 10 * H, "warning",
               False, ("timings",), True, {"gpu": 1, "slowdown": 0.1}),
]


def test_false_alarms_go_to_the_most_specific_benign_cause() -> None:
    alarms = [
        _alarm("n1", 3, T0 + 2 * H),        # its GPU's lottery offset (beats the job-long classes)
        _alarm("n1", 5, T0 + 1.1 * H),      # its GPU's wander excursion
        _alarm("n2", 0, T0 + 5.5 * H),      # the restart's first steps: the shortest job event
        _alarm("n2", 4, T0 + 3 * H),        # only job-long noise classes, alike: job-wide
        _alarm("n1", 0, T0 + 30 * H),       # nothing benign covers it
        _alarm("n2", 1, T0 + 7.5 * H),      # a true alarm: the harmful fault on that GPU
        _alarm("n3", 2, T0 + 21 * H),       # an MoE job's hot experts beat the noise every job has
    ]
    got = straggler_causes(TRUTH, alarms, ScoreParams())
    assert got == {"gpu_lottery": 1, "gpu_wander": 1, "job_restart": 1, JOB_WIDE: 1, "none": 1,
                   "moe_hot_expert": 1}


def test_no_alarm_no_cause() -> None:
    assert straggler_causes(TRUTH, [], ScoreParams()) == {}

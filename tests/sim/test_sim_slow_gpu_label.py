"""eval's label for an alarm on a benign slow GPU (``score._Index.expected_finding``): the
straggler analysis documents that a persistent GPU offset at or above its floor
(``--min-slowdown``, 3 %) may be reported (a slow GPU, ``docs/stragglers.md``), so an alarm on a
GPU whose lottery offset reaches the floor is neither a false alarm nor a true one; one below
the floor, on another GPU of the node, or without a floor set stays a false alarm."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from minutiae.scoring.score import Detection, ScoreParams, score
from minutiae.scoring.truth import TruthEvent
from minutiae.sim.eval.causes import straggler_causes

T0 = 1_736_000_000.0
H = 3600.0
FLOOR = 0.03
P = replace(ScoreParams(), slow_gpu_floor=FLOOR)


def _lottery(gpu: int, offset: float | None) -> TruthEvent:
    details: dict[str, object] = {"job_id": "9", "gpu": gpu}
    if offset is not None:
        details["offset"] = offset
    return TruthEvent("", "gpu_lottery", "n1", f"gpu:{gpu}", T0, T0 + 10 * H, "info", False,
                      ("timings",), False, details)


def _alarm(gpu: int, t: float = T0 + 2 * H) -> Detection:
    return Detection("stragglers", "n1", t, "straggler",
                     reason=f"gpu:n1/{gpu} +6.3% slower since step 30")


def _card(truth: list[TruthEvent], alarms: list[Detection], p: ScoreParams = P) -> tuple[int, int]:
    c = score(truth, alarms, 100.0, p, "stragglers")
    return c.false_alarms, c.expected


@pytest.mark.parametrize("offset", [math.log1p(FLOOR), 0.0562])
def test_alarm_on_a_gpu_whose_offset_reaches_the_floor_is_expected(offset: float) -> None:
    truth = [_lottery(3, offset)]
    assert _card(truth, [_alarm(3)]) == (0, 1)
    assert straggler_causes(truth, [_alarm(3)], P) == {}
    # the old labelling (no floor): the same alarm is a gpu_lottery false alarm
    assert _card(truth, [_alarm(3)], ScoreParams()) == (1, 0)
    assert straggler_causes(truth, [_alarm(3)], ScoreParams()) == {"gpu_lottery": 1}


def test_below_the_floor_other_gpu_outside_the_job_or_no_offset_stay_false() -> None:
    below = [_lottery(3, math.log1p(FLOOR) - 1e-4)]
    assert _card(below, [_alarm(3)]) == (1, 0)
    above = [_lottery(3, 0.05)]
    assert _card(above, [_alarm(4)]) == (1, 0)                 # another GPU of the node
    assert _card(above, [_alarm(3, T0 + 20 * H)]) == (1, 0)    # after the job: matches nothing
    assert _card([_lottery(3, None)], [_alarm(3)]) == (1, 0)   # a dataset without offsets


def test_a_harmful_fault_on_that_gpu_is_still_a_true_alarm() -> None:
    fault = TruthEvent("f1", "persistent_straggler", "n1", "gpu:3", T0 + H, T0 + 3 * H, "warning",
                       False, ("timings",), True, {"gpu": 3, "slowdown": 0.1})
    c = score([_lottery(3, 0.05), fault], [_alarm(3)], 100.0, P, "stragglers")
    assert (c.false_alarms, c.expected, c.cls("persistent_straggler").detected) == (0, 0, 1)

"""Scoring on hand-made truth/detection pairs whose right answers are known."""

from __future__ import annotations

import pytest

from minutiae.model import Severity
from minutiae.scoring.score import Detection, ScoreParams, merge_alarms, score
from minutiae.scoring.truth import TruthEvent

H = 3600.0
T0 = 1_736_121_600.0


def fault(i: int, cls: str, node: str, start: float, end: float, *, drain: bool = True,
          harmful: bool = True, **details: object) -> TruthEvent:
    return TruthEvent(f"f{i}", cls, node, "gpu:0", T0 + start, T0 + end, "critical", drain,
                      ("kern.log",), harmful, dict(details))


TRUTH = [
    fault(1, "gpu_off_bus", "n1", 1 * H, 11 * H, crash=True, job_gpus=64, step_s=10.0),
    fault(2, "gpu_off_bus", "n2", 5 * H, 7 * H, crash=True, job_gpus=0),
    fault(3, "thermal_throttle", "n3", 2 * H, 4 * H, drain=False, slowdown=0.2, job_gpus=32, step_s=5.0),
    fault(4, "app_xid", "n4", 3 * H, 3 * H + 60, drain=False, harmful=False),
]
NODE_DAYS = 4 * 1.0
P = ScoreParams(checkpoint_minutes=30, restart_minutes=10, manual_detection_hours=6,
                wrong_drain_hours=4, gpus_per_node=8)


def det(node: str, t: float, kind: str, code: int | None = None, drain: bool = False,
        sev: Severity = Severity.CRITICAL) -> Detection:
    return Detection("d", node, T0 + t, kind, sev, drain, code)


def perfect() -> list[Detection]:
    return [det("n1", 1 * H, "xid", 79, True), det("n2", 5 * H, "xid", 79, True),
            det("n3", 2 * H, "throttle", sev=Severity.WARNING)]


def test_perfect_detector() -> None:
    sc = score(TRUTH, perfect(), NODE_DAYS, P)
    off = sc.cls("gpu_off_bus")
    assert (off.faults, off.detected, off.recall, off.precision) == (2, 2, 1.0, 1.0)
    assert off.latency_median_s == 0.0 and off.latency_p95_s == 0.0
    assert sc.cls("thermal_throttle").recall == 1.0
    assert sc.false_alarms == 0 and sc.false_alarms_per_1000_node_days == 0.0
    assert (sc.drains.right, sc.drains.wrong, sc.drains.missed) == (2, 0, 0)
    # crash: 64 GPUs x (15 + 10) min lost either way; idle: without 8 x 6 h + 8 x 2 h, with 0
    crash = 64 * 25 / 60
    assert sc.gpu_hours.without == pytest.approx(crash + 8 * 6 + 8 * 2 + 32 * 0.2 * 2)
    # throttle detected at once: only the restart to move off the node (32 GPUs x 10 min)
    assert sc.gpu_hours.with_minutiae == pytest.approx(crash + 32 * 10 / 60)


def test_silent_detector() -> None:
    sc = score(TRUTH, [], NODE_DAYS, P)
    assert all(c.recall == 0.0 and c.detected == 0 for c in sc.classes)
    assert all(c.precision is None and c.latency_median_s is None for c in sc.classes)
    assert (sc.drains.right, sc.drains.wrong, sc.drains.missed) == (0, 0, 2)
    assert sc.gpu_hours.saved == pytest.approx(0.0)


def test_late_detector_latency_in_seconds_and_steps() -> None:
    dets = [det("n1", 2 * H, "xid", 79, True), det("n2", 5 * H + 600, "gpu_off_bus", drain=True)]
    sc = score(TRUTH, dets, NODE_DAYS, P)
    off = sc.cls("gpu_off_bus")
    assert off.recall == 1.0
    assert off.latency_median_s == pytest.approx((3600 + 600) / 2)
    assert off.latency_p95_s == pytest.approx(600 + 0.95 * 3000)
    # only n1's fault ran a job (10 s steps): 3600 s = 360 steps
    assert off.latency_median_steps == pytest.approx(360.0)
    # late drains cost idle time: n1 1 h, n2 10 min (instead of 6 h and 2 h)
    crash = 64 * 25 / 60
    assert sc.gpu_hours.with_minutiae == pytest.approx(crash + 8 * 1 + 8 * (600 / 3600) + 32 * 0.2 * 2)


def test_detection_after_grace_is_a_false_alarm() -> None:
    sc = score(TRUTH, [det("n2", 7 * H + 1801, "xid", 79, True)], NODE_DAYS, P)
    assert sc.cls("gpu_off_bus").detected == 0
    assert sc.false_alarms == 1 and sc.false_alarm_causes == {"none": 1}
    assert sc.drains.wrong == 1 and sc.drains.missed == 2


def test_false_alarming_detector() -> None:
    dets = perfect() + [
        det("n4", 3 * H + 5, "xid", 13, sev=Severity.WARNING),       # application Xid
        det("n5", 8 * H, "xid", 79, drain=True),                     # nothing there
        det("n5", 8 * H + 100, "xid", 79, drain=True),               # same burst: merged
        det("n4", 9 * H, "xid", 13, sev=Severity.INFO),               # below min severity
    ]
    sc = score(TRUTH, dets, NODE_DAYS, P)
    assert sc.false_alarms == 2
    assert sc.false_alarm_causes == {"app_xid": 1, "none": 1}
    assert sc.false_alarms_per_1000_node_days == pytest.approx(2 / 4 * 1000)
    off = sc.cls("gpu_off_bus")
    assert (off.alarms_true, off.alarms_false, off.precision) == (2, 1, pytest.approx(2 / 3))
    assert sc.cls("app_xid").alarms_false == 1 and sc.cls("app_xid").faults == 0
    assert (sc.drains.right, sc.drains.wrong, sc.drains.missed) == (2, 1, 0)
    assert sc.gpu_hours.with_minutiae == pytest.approx(64 * 25 / 60 + 32 * 10 / 60 + 8 * 4)


def test_merge_keeps_bursts_apart_by_kind_and_gap() -> None:
    ds = [det("n1", 0, "xid", 94), det("n1", 10, "xid", 94), det("n1", 20, "xid", 48),
          det("n1", 901 + 10, "xid", 94)]
    assert [(d.key, d.time - T0) for d in merge_alarms(ds, P)] == [
        ("xid:94", 0), ("xid:48", 20), ("xid:94", 911)]


def test_compatible_class_wins_over_whole_span_fault() -> None:
    lemon = fault(9, "lemon_node", "n1", 0, 24 * H)
    app = fault(8, "app_xid", "n1", 6 * H, 6 * H + 60, drain=False, harmful=False)
    sc = score([lemon, app], [det("n1", 6 * H, "xid", 13, sev=Severity.WARNING)], 1.0, P)
    assert sc.false_alarm_causes == {"app_xid": 1}
    assert sc.cls("lemon_node").detected == 0


def test_fleet_wide_regression_matches_node_less_detection() -> None:
    reg = TruthEvent("r1", "perf_regression", None, "nccl=2.20.5", T0 + H, T0 + 48 * H, "warning",
                     False, ("runs",), True, {"scope": "fleet"})
    sc = score([reg], [Detection("regress", None, T0 + 3 * H, "regression")], 1.0, P)
    r = sc.cls("perf_regression")
    assert (r.detected, r.latency_median_s) == (1, 2 * H)
    assert sc.to_json()["classes"]["perf_regression"]["recall"] == 1.0


def test_regression_of_another_signature_is_a_false_alarm_not_a_find() -> None:
    # the rollout slowed gpt-175b-fp8; a cut in llama's runs at the same time explains nothing
    reg = TruthEvent("r1", "perf_regression", None, "nccl=2.20.5", T0 + H, T0 + 48 * H, "warning",
                     False, ("runs",), True, {"scope": "fleet", "signature": "gpt-175b-fp8"})
    other = Detection("regress", None, T0 + 3 * H, "regression", subject="llama-70b-bf16-ws64-8x8")
    sc = score([reg], [other], 1.0, P)
    assert sc.cls("perf_regression").detected == 0
    assert sum(sc.false_alarm_causes.values()) == 1
    right = Detection("regress", None, T0 + 4 * H, "regression", subject="gpt-175b-fp8-ws512-64x8")
    sc = score([reg], [other, right], 1.0, P)
    r = sc.cls("perf_regression")
    assert (r.detected, r.latency_median_s) == (1, 3 * H)
    # a prefix that is not a whole name does not fit (gpt-175b-fp8x is another model)
    near = Detection("regress", None, T0 + 4 * H, "regression", subject="gpt-175b-fp8x-ws8-1x8")
    assert score([reg], [near], 1.0, P).cls("perf_regression").detected == 0


def test_lemon_found_through_its_failures_and_repeat_drains() -> None:
    lemon = fault(20, "lemon_node", "n9", 0, 24 * H)
    f1 = fault(21, "gpu_off_bus", "n9", 2 * H, 3 * H, crash=True, lemon=True, job_gpus=0)
    dets = [det("n9", 2 * H, "xid", 79, True),
            det("n9", 3 * H + 60, "ib_port_down", drain=True)]    # the repair reboot's first minutes
    sc = score([lemon, f1], dets, 1.0, P)
    assert sc.cls("lemon_node").detected == 1 and sc.cls("lemon_node").latency_median_s == 2 * H
    assert (sc.drains.right, sc.drains.wrong, sc.drains.missed, sc.drains.repeat) == (1, 0, 0, 1)


def test_params_from_the_profile_cost_table() -> None:
    p = ScoreParams.from_cost({"checkpoint_minutes": 60.0, "wrong_drain_hours": 1.0}, 4)
    assert (p.checkpoint_minutes, p.wrong_drain_hours, p.restart_minutes, p.gpus_per_node) == (60.0, 1.0, 10.0, 4)

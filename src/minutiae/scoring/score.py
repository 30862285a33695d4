"""Scoring detections against the simulator's ground truth (pure).

A ``Detection`` is one thing a detector said about a node at a time. Detections of the same
(detector, node, kind, code) closer than ``merge_s`` are one *alarm* (an operator sees one page,
not eight lines of the same Xid burst). An alarm *matches* a truth event that covers its node
and whose window ``[start - slack_s, end + grace_s]`` holds the alarm time; among several, a
class the alarm's kind can explain wins (``Explains``: data in the fault profile, see
:mod:`minutiae.scoring.explain`), harmful before benign, then
the shortest window. An alarm matched to a harmful fault is a true alarm; one matched to a
benign event (an application Xid, a planned reboot...) or to nothing is a false alarm.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minutiae.model import Severity
from minutiae.scoring.explain import Explains, default_explains
from minutiae.scoring.truth import TruthEvent


@dataclass(frozen=True, slots=True)
class Detection:
    """One thing a detector reported. ``node`` is None for fleet-level findings (a regression of
    a job signature); ``drain`` says the detector's pipeline would drain the node for it."""

    detector: str
    node: str | None
    time: float
    kind: str
    severity: Severity = Severity.WARNING
    drain: bool = False
    code: int | None = None
    reason: str = ""
    basis: str | None = None      # timing analyses: compute | communication | step (totals only)
    subject: str | None = None    # node-less alarms: what they are about (a regression's run signature)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.code}" if self.code is not None else self.kind

    def to_json(self) -> dict[str, Any]:
        return {"detector": self.detector, "node": self.node, "time": self.time, "kind": self.kind,
                "code": self.code, "severity": self.severity.label, "drain": self.drain,
                "reason": self.reason}


@dataclass(frozen=True, slots=True)
class ScoreParams:
    slack_s: float = 60.0         # an alarm this much before a fault's start still matches it
    grace_s: float = 1800.0       # ... and this much after its end
    merge_s: float = 900.0        # same (detector, node, kind) within this: one alarm
    min_severity: Severity = Severity.WARNING   # detections below this are not alarms
    checkpoint_minutes: float = 30.0
    restart_minutes: float = 10.0
    manual_detection_hours: float = 6.0
    wrong_drain_hours: float = 4.0
    gpus_per_node: int = 8
    #: a slow-rank analysis' floor (``stragglers --min-slowdown``): an alarm on a GPU whose
    #: benign persistent offset (``gpu_lottery`` truth, ``details["offset"]``, log) reaches it is
    #: an expected finding (``expected_finding``); None: every benign match is a false alarm
    slow_gpu_floor: float | None = None

    @staticmethod
    def from_cost(cost: Mapping[str, float], gpus_per_node: int) -> ScoreParams:
        d = ScoreParams()
        return ScoreParams(
            gpus_per_node=gpus_per_node,
            checkpoint_minutes=float(cost.get("checkpoint_minutes", d.checkpoint_minutes)),
            restart_minutes=float(cost.get("restart_minutes", d.restart_minutes)),
            manual_detection_hours=float(cost.get("manual_detection_hours", d.manual_detection_hours)),
            wrong_drain_hours=float(cost.get("wrong_drain_hours", d.wrong_drain_hours)))


def gpu_of(d: Detection) -> str | None:
    """``gpu:<i>`` of a straggler alarm on one GPU (its message starts with ``gpu:<node>/<i>``)."""
    head = d.reason.split(" ", 1)[0] if d.reason else ""
    if not head.startswith("gpu:") or "/" not in head:
        return None
    return "gpu:" + head.rsplit("/", 1)[1]


@dataclass(frozen=True, slots=True)
class ClassScore:
    """Per fault class. ``recall``: detected faults / faults (None without faults).
    ``precision``: true alarms / all alarms attributed to the class (None without alarms);
    a false alarm is attributed to the first class its kind can explain. Latencies: first
    matching alarm minus fault start, clamped at 0, in seconds and in training steps of the job
    that ran on the node (None when no detected fault ran a job)."""

    cls: str
    faults: int
    detected: int
    recall: float | None
    alarms_true: int
    alarms_false: int
    precision: float | None
    latency_median_s: float | None
    latency_p95_s: float | None
    latency_median_steps: float | None
    latency_p95_steps: float | None


@dataclass(frozen=True, slots=True)
class DrainScore:
    """``right``: faults that need a drain (lemon records aside) and got one; ``missed``: such
    faults that got none; ``wrong``: drains no such fault explains; ``repeat``: further drains
    of a node for a fault it was already drained for (e.g. after its repair reboot)."""

    right: int
    wrong: int
    missed: int
    repeat: int = 0


@dataclass(frozen=True, slots=True)
class GpuHours:
    """GPU-hours the fleet lost to the harmful faults, without and with minutiae acting.
    Crash faults: the crashed job loses half a checkpoint interval plus a restart either way;
    the broken node then sits in the pool (jobs land on it and fail) until a human notices
    (``manual_detection_hours``) or until minutiae drains it (detection latency). Slow faults:
    the whole job runs ``slowdown`` slower until the fault ends or a human notices
    (``manual_detection_hours``), or, with minutiae, until it is detected (plus a restart to
    move off the node). A wrong drain idles a node for
    ``wrong_drain_hours``."""

    without: float
    with_minutiae: float

    @property
    def saved(self) -> float:
        return self.without - self.with_minutiae


#: what slows in a slow-rank fault: the compute sections or the rank's own communication
BASIS_OF_CLASS = {"persistent_straggler": "compute", "fail_slow": "compute", "thermal_throttle": "compute",
                  "hung_task": "compute", "ib_link_flap": "communication",
                  "ib_symbol_errors": "communication", "ib_rate_degraded": "communication"}


@dataclass(frozen=True, slots=True)
class Scorecard:
    """The whole score of one detector (or of the union of all, ``detector == "all"``).
    ``false_alarms_per_1000_node_days``: false alarms / node-days x 1000;
    ``false_alarm_causes``: false alarms by the benign class that explains them (``none``
    when nothing in the truth does). ``basis``: true alarms of a timing analysis on a slow-rank
    fault (``BASIS_OF_CLASS``) by whether the analysis named what slowed (``right``: compute for
    a slow GPU/node, communication for a slow link; ``wrong``; ``step``: the job logged step
    totals only, so the analysis could not tell)."""

    detector: str
    node_days: float
    classes: tuple[ClassScore, ...]
    alarms: int
    false_alarms: int
    false_alarms_per_1000_node_days: float
    false_alarm_causes: Mapping[str, int]
    drains: DrainScore
    gpu_hours: GpuHours
    latencies: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    basis: Mapping[str, int] = field(default_factory=dict)
    #: alarms on a benign slow GPU beyond the floor (``expected_finding``): neither false nor true
    expected: int = 0

    def cls(self, name: str) -> ClassScore:
        return next(c for c in self.classes if c.cls == name)

    def to_json(self) -> dict[str, Any]:
        return {
            "detector": self.detector, "node_days": round(self.node_days, 3),
            "alarms": self.alarms, "false_alarms": self.false_alarms,
            "expected_findings": self.expected,
            "false_alarms_per_1000_node_days": round(self.false_alarms_per_1000_node_days, 3),
            "false_alarm_causes": dict(self.false_alarm_causes),
            "basis": dict(self.basis),
            "drains": {"right": self.drains.right, "wrong": self.drains.wrong, "missed": self.drains.missed,
                       "repeat": self.drains.repeat},
            "gpu_hours_lost": {"without_minutiae": round(self.gpu_hours.without, 2),
                               "with_minutiae": round(self.gpu_hours.with_minutiae, 2),
                               "saved": round(self.gpu_hours.saved, 2)},
            "classes": {c.cls: {k: _round(getattr(c, k)) for k in ClassScore.__slots__ if k != "cls"}
                        for c in self.classes},
        }


def _round(v: Any) -> Any:
    return round(v, 4) if isinstance(v, float) else v


def merge_alarms(dets: Iterable[Detection], params: ScoreParams) -> list[Detection]:
    """Collapse bursts: per (detector, node, kind/code, drains or not), keep a detection only
    when the previous kept one is more than ``merge_s`` older (a drain is never folded into the
    warnings before it: a count rule alarming on the third of a burst of lines drains);
    detections below ``min_severity`` are dropped unless they drain."""
    out: list[Detection] = []
    last: dict[tuple[str, str | None, str, bool], float] = {}
    for d in sorted(dets, key=lambda d: (d.time, d.detector, d.node or "", d.key)):
        if d.severity < params.min_severity and not d.drain:
            continue
        k = (d.detector, d.node, d.key, d.drain)
        prev = last.get(k)
        last[k] = d.time
        if prev is not None and d.time - prev <= params.merge_s:
            continue
        out.append(d)
    return out


def _same_subject(d: Detection, t: TruthEvent) -> bool:
    """A node-less alarm about one job signature (a regression) is explained only by truth about
    that signature: run signatures carry the world size (``gpt-175b-fp8-ws64-8x8``), the truth names
    the model (``gpt-175b-fp8``); truth without a signature (or an alarm without a subject) fits any."""
    want = t.details.get("signature") if d.node is None else None
    if not want or d.subject is None:
        return True
    return d.subject == want or d.subject.startswith(f"{want}-")


class _Index:
    """Truth by node; a fleet- or job-wide event only explains alarms whose kind it fits, and a
    harmful node fault of another class explains an alarm only when nothing fitting does."""

    def __init__(self, truth: Sequence[TruthEvent], explains: Explains | None = None) -> None:
        self.explains = explains if explains is not None else default_explains()
        self.by_node: dict[str, list[TruthEvent]] = {}
        self.fleet: list[TruthEvent] = []        # scope "fleet": covers every node
        self.nodeless: list[TruthEvent] = []     # job- and fleet-wide: what a node-less alarm can match
        for t in truth:
            if t.node is not None:
                self.by_node.setdefault(t.node, []).append(t)
                continue
            self.nodeless.append(t)
            if t.details.get("scope") == "fleet":
                self.fleet.append(t)
            for n in t.details.get("nodes", ()):
                self.by_node.setdefault(str(n), []).append(t)

    def match(self, d: Detection, p: ScoreParams) -> TruthEvent | None:
        pool = self.by_node.get(d.node, []) + self.fleet if d.node is not None else self.nodeless
        cands = [t for t in pool if t.start - p.slack_s <= d.time <= t.end + p.grace_s
                 and _same_subject(d, t)]
        if not cands:
            return None
        explains = self.explains.of(d.key, d.kind)

        def rank(t: TruthEvent) -> tuple[int, float]:
            compat = t.cls in explains
            tier = 0 if (compat and t.harmful) else 1 if compat else 2 if (t.harmful and t.node) else 9
            return (tier, t.end - t.start)

        cands = [t for t in cands if rank(t)[0] < 9]
        if not cands:
            return None
        return min(cands, key=rank)

    def expected_finding(self, d: Detection, p: ScoreParams) -> bool:
        """``d`` names a GPU whose benign persistent offset (its ``gpu_lottery`` truth) reaches
        ``p.slow_gpu_floor``: the slow GPU a straggler analysis documents it may report (a
        persistent offset at or above its floor, ``docs/stragglers.md``), so neither a false
        alarm nor, as nothing harmful is there, a true one (and never a missed fault)."""
        gpu = gpu_of(d)
        if p.slow_gpu_floor is None or gpu is None or d.node is None:
            return False
        need = float(np.log1p(p.slow_gpu_floor))
        return any(t.cls == "gpu_lottery" and t.component == gpu and not t.harmful
                   and t.start - p.slack_s <= d.time <= t.end + p.grace_s
                   and float(t.details.get("offset", -np.inf)) >= need
                   for t in self.by_node.get(d.node, ()))


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def score(truth: Sequence[TruthEvent], detections: Iterable[Detection], node_days: float,
          params: ScoreParams | None = None, detector: str = "all",
          explains: Explains | None = None) -> Scorecard:
    """Score ``detections`` against ``truth`` (see the module docstring for the rules);
    ``explains``: what explains the truth's classes (None: the default profile's)."""
    p = params or ScoreParams()
    idx = _Index(truth, explains)
    alarms = merge_alarms(detections, p)
    harmful = [t for t in truth if t.harmful and t.signature]
    lemons = {t.node: t.id for t in harmful if t.cls == "lemon_node" and t.node}
    first: dict[str, float] = {}
    true_by: dict[str, int] = {}
    false_by: dict[str, int] = {}
    causes: dict[str, int] = {}
    basis: dict[str, int] = {}
    n_false = n_expected = 0
    for a in alarms:
        t = idx.match(a, p)
        if (t is None or not t.harmful) and idx.expected_finding(a, p):
            n_expected += 1
            continue
        if t is not None and t.harmful:
            true_by[t.cls] = true_by.get(t.cls, 0) + 1
            want = BASIS_OF_CLASS.get(t.cls)
            if a.basis is not None and want is not None:
                got = "step" if a.basis == "step" else "right" if a.basis == want else "wrong"
                basis[got] = basis.get(got, 0) + 1
            first[t.id] = min(first.get(t.id, a.time), a.time)
            lemon = lemons.get(t.node or "") if t.details.get("lemon") else None
            if lemon is not None:       # a lemon is found when one of its failures is
                first[lemon] = min(first.get(lemon, a.time), a.time)
            continue
        n_false += 1
        cause = t.cls if t is not None else "none"
        causes[cause] = causes.get(cause, 0) + 1
        fits = idx.explains.of(a.key, a.kind)
        guess = fits[0] if fits else a.key
        false_by[guess] = false_by.get(guess, 0) + 1
    classes = []
    lat_all: dict[str, tuple[float, ...]] = {}
    for cls in sorted({t.cls for t in harmful} | set(false_by)):
        fs = [t for t in harmful if t.cls == cls]
        det = [t for t in fs if t.id in first]
        lat = [max(0.0, first[t.id] - t.start) for t in det]
        steps = [max(0.0, first[t.id] - t.start) / float(t.details["step_s"]) for t in det
                 if t.details.get("step_s")]
        tp, fp = true_by.get(cls, 0), false_by.get(cls, 0)
        lat_all[cls] = tuple(lat)
        classes.append(ClassScore(
            cls=cls, faults=len(fs), detected=len(det), recall=len(det) / len(fs) if fs else None,
            alarms_true=tp, alarms_false=fp, precision=tp / (tp + fp) if tp + fp else None,
            latency_median_s=_pct(lat, 50), latency_p95_s=_pct(lat, 95),
            latency_median_steps=_pct(steps, 50), latency_p95_steps=_pct(steps, 95)))
    drains = _drains(truth, alarms, idx, p)
    hours = _gpu_hours(harmful, first, drains[1], p)
    return Scorecard(
        detector=detector, node_days=node_days, classes=tuple(classes), alarms=len(alarms),
        false_alarms=n_false,
        false_alarms_per_1000_node_days=n_false / node_days * 1000.0 if node_days > 0 else 0.0,
        false_alarm_causes=dict(sorted(causes.items())), drains=drains[0], gpu_hours=hours,
        latencies=lat_all, basis=dict(sorted(basis.items())), expected=n_expected)


def _drains(truth: Sequence[TruthEvent], alarms: list[Detection], idx: _Index,
            p: ScoreParams) -> tuple[DrainScore, int]:
    need = [t for t in truth if t.harmful and t.expect_drain and t.node is not None
            and t.cls != "lemon_node"]
    drained: set[str] = set()
    wrong = repeat = 0
    last_drain: dict[str | None, float] = {}
    for a in alarms:
        if not a.drain:
            continue
        prev = last_drain.get(a.node)
        if prev is not None and a.time - prev <= p.merge_s:
            continue                      # same drain, another detector or kind
        last_drain[a.node] = a.time
        cands = [t for t in need if t.node == a.node and t.start - p.slack_s <= a.time <= t.end + p.grace_s]
        if not cands:
            wrong += 1
        elif all(t.id in drained for t in cands):
            repeat += 1
        drained.update(t.id for t in cands)
    right = sum(1 for t in need if t.id in drained)
    return DrainScore(right, wrong, len(need) - right, repeat), wrong


def _gpu_hours(harmful: list[TruthEvent], first: Mapping[str, float], wrong_drains: int,
               p: ScoreParams) -> GpuHours:
    crash_h = (p.checkpoint_minutes / 2 + p.restart_minutes) / 60.0
    without = with_ = 0.0
    for t in harmful:
        if t.node is None:
            continue
        dur_h = max(0.0, t.end - t.start) / 3600.0
        job_gpus = float(t.details.get("job_gpus", 0))
        det_h = max(0.0, first[t.id] - t.start) / 3600.0 if t.id in first else None
        if t.details.get("crash"):
            lost = job_gpus * crash_h
            idle_without = p.gpus_per_node * min(dur_h, p.manual_detection_hours) if t.expect_drain else 0.0
            idle_with = p.gpus_per_node * min(dur_h, det_h) if (t.expect_drain and det_h is not None) else idle_without
            without += lost + idle_without
            with_ += lost + idle_with
        elif float(t.details.get("slowdown", 0.0)) > 0 and job_gpus > 0:
            s = float(t.details["slowdown"])
            job_h = min(dur_h, p.manual_detection_hours) if t.end - t.start > 0 else 0.0
            slow_without = job_gpus * s * job_h
            if det_h is not None and det_h < job_h:
                slow_with = job_gpus * s * det_h + job_gpus * p.restart_minutes / 60.0
                slow_with = min(slow_with, slow_without)
            else:
                slow_with = slow_without
            without += slow_without
            with_ += slow_with
    with_ += wrong_drains * p.gpus_per_node * p.wrong_drain_hours
    return GpuHours(without, with_)

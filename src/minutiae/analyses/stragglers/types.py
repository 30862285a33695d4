"""Records produced by the straggler analysis (what each score means is documented here)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import numpy as np


class Scope(Enum):
    """Where the slowness is: one GPU, every GPU of a node, one node's network link, or the
    nodes under one leaf switch (communication only)."""

    GPU = "gpu"
    NODE = "node"
    LINK = "link"
    LEAF = "leaf"


class Basis(Enum):
    """Which timing revealed it: ``compute`` (compute sections, or step minus collective
    sections), ``communication`` (the rank's own time inside collectives once the wait for the
    slowest peer is removed) or ``step`` (only step totals were given: taken as the rank's work)."""

    COMPUTE = "compute"
    COMMUNICATION = "communication"
    STEP = "step"


class Reference(Protocol):
    """What the sequential test needs of a peer reference (``peers.PeerReference``): each
    rank's log-ratio to the peers doing the same work, computed in place in ``logx``; with
    ``node`` also the ratios the node test takes its medians of; and the typical log time of
    each step. Declared here so the test and the reference do not import each other."""

    def ratio(self, logx: np.ndarray, node: bool = False,
              ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]: ...


@dataclass(frozen=True, slots=True)
class DetectorDesign:
    """One one-sided CUSUM on standardised log-ratios ``z`` (see ``stragglers_calib``).

    ``k`` is the reference value (half the shift in noise units it is tuned for), ``h`` the alarm
    threshold solved from the false-alarm budget ``alpha`` (per rank and step), ``clip`` the
    winsorisation of each increment (it bounds what one GC pause or loader hiccup can add);
    ``steps_at_clip`` is how many steps at the clip the fast test needs to alarm (3 unless the
    job's one-step spikes are frequent enough to break the budget at 3)."""

    name: str
    k: float
    h: float
    clip: float
    alpha: float
    steps_at_clip: int = 0  # the fewest steps that can alarm (0: not set by the clip)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "k": self.k, "h": round(self.h, 4), "clip": round(self.clip, 4),
                "alpha_per_rank_step": self.alpha, "steps_at_clip": self.steps_at_clip}


@dataclass(frozen=True, slots=True)
class Design:
    """The thresholds derived from the target false-alarm rate.

    ``alpha`` (per tested rank-step) = target per node-day x step seconds x ``logged_every`` /
    (86,400 x ranks per node), shared equally by the detectors of every timing basis analysed
    (``logged_every``: the log keeps one step in that many, the median gap of its step numbers)."""

    target_per_1000_node_days: float
    step_seconds: float
    ranks_per_node: int
    alpha: float
    detectors: tuple[DetectorDesign, ...]
    logged_every: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "target_false_alarms_per_1000_node_days": self.target_per_1000_node_days,
            "step_seconds": self.step_seconds, "logged_every_steps": self.logged_every,
            "ranks_per_node": self.ranks_per_node,
            "alpha_per_rank_step": self.alpha,
            "detectors": [d.to_json() for d in self.detectors],
        }


@dataclass(frozen=True, slots=True)
class Suspect:
    """One located straggler.

    - ``rank``: the representative rank (the slowest one of ``ranks`` when several);
    - ``component``: ``gpu:<node>/<gpu>``, ``node:<node>``, ``link:<node>``, ``leaf:<leaf>`` or
      ``rank:<rank>`` when the input names no node;
    - ``slowdown``: how much slower than its peers doing the same work the rank is on ``basis``
      (0.05 = 5 % slower), the geometric mean of its per-step ratio to the peer median since
      ``since_step``; ``ci_low``/``ci_high`` the 95 % confidence interval of that figure;
    - ``since_step``: the estimated first slow step (CUSUM change-point estimate);
      ``detected_step``: the step at which the sequential test crossed its threshold;
    - ``score``: the test statistic over its threshold at detection (>= 1 by construction);
    - ``job_slowdown``: the extra step time the whole synchronous job pays, as a fraction of a
      step (``slowdown`` x this basis' share of the step);
    - ``gpu_hours_per_day``: cost of keeping it = ``job_slowdown`` x job GPUs x 24 h.
    """

    rank: int
    node: str | None
    gpu: int | None
    leaf: str | None
    scope: Scope
    component: str
    ranks: tuple[int, ...]
    basis: Basis
    slowdown: float
    ci_low: float
    ci_high: float
    since_step: int
    detected_step: int
    detector: str
    score: float
    job_slowdown: float
    gpu_hours_per_day: float
    segment: int | None = None  # the run segment (restarts: ``runs.py``); None: one run
    peak: float = float("nan")  # the slowdown when the test alarmed (its excursion's mean)
    held: float = float("nan")  # ... less its largest step (``held.py``; NaN: one step)
    after: float = float("nan")  # a one-step alarm's mean since onset without that step

    def to_json(self) -> dict[str, Any]:
        return {"segment": self.segment,
            "rank": self.rank, "node": self.node, "gpu": self.gpu, "leaf": self.leaf,
            "scope": self.scope.value, "component": self.component, "ranks": list(self.ranks),
            "basis": self.basis.value, "slowdown": _r(self.slowdown),
            "slowdown_ci": [_r(self.ci_low), _r(self.ci_high)], "since_step": self.since_step,
            "detected_step": self.detected_step, "detector": self.detector,
            "score": _r(self.score), "job_slowdown": _r(self.job_slowdown),
            "gpu_hours_per_day": _r(self.gpu_hours_per_day, 2),
            "slowdown_at_detection": _r(self.peak),
        }


@dataclass(frozen=True, slots=True)
class SlowGpu:
    """One of the slowest GPUs whose persistent slowdown is below ``--min-slowdown`` (not a
    suspect: the fleet team's replace-or-not list). ``slowdown`` is its geometric-mean ratio to
    its peers over every step tested, ``ci_low``/``ci_high`` a 95 % interval allowing for the
    autocorrelation of its ratios; ``job_slowdown`` its slowdown x its basis' share of the step:
    the most the synchronous job can gain from it (replacing it alone gains at most the gap to
    the next GPU on the list); ``gpu_hours_per_day`` that x job GPUs x 24 h."""

    rank: int
    node: str | None
    gpu: int | None
    component: str
    slowdown: float
    ci_low: float
    ci_high: float
    job_slowdown: float
    gpu_hours_per_day: float

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "node": self.node, "gpu": self.gpu,
                "component": self.component, "slowdown": _r(self.slowdown),
                "slowdown_ci": [_r(self.ci_low), _r(self.ci_high)],
                "job_slowdown": _r(self.job_slowdown),
                "gpu_hours_per_day": _r(self.gpu_hours_per_day, 2)}


@dataclass(frozen=True, slots=True)
class WorkloadImbalance:
    """Slowness that moves between ranks (``moving.py``): ``episodes`` alarms on ``ranks``,
    ``recovered`` of which ended; ``slowdown`` the median while slow; never a hardware
    suspect."""

    ranks: tuple[int, ...]
    episodes: int
    recovered: int
    slowdown: float
    first_step: int
    pattern: str

    def to_json(self) -> dict[str, Any]:
        return {"ranks": list(self.ranks), "episodes": self.episodes,
                "recovered": self.recovered, "slowdown": _r(self.slowdown),
                "first_step": self.first_step, "pattern": self.pattern}


@dataclass(frozen=True, slots=True)
class JobChange:
    """The typical ``series`` (``step``, ``compute`` or ``communication``) time changed by
    ``change`` (0.3 = 30 % slower) from ``step`` on; ``held``: it lasted to the end."""

    series: str
    step: int
    change: float
    held: bool

    def to_json(self) -> dict[str, Any]:
        return {"series": self.series, "step": self.step, "change": round(self.change, 4),
                "held": self.held}

    def text(self) -> str:
        word = {"communication": "collective (communication) time of every rank",
                "step": "job step time", "compute": "job compute time"}[self.series]
        tail = "held to the end" if self.held else "then went back"
        return f"{word} {self.change:+.1%} from step {self.step}, {tail}"


@dataclass(frozen=True, slots=True)
class StoppedRank:
    """A rank that stopped reporting: its last step is ``last_step`` while the job went on to
    ``job_last_step`` (a hang, a crash or a lost logger: a finding in itself)."""

    rank: int
    node: str | None
    last_step: int
    job_last_step: int

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "node": self.node, "last_step": self.last_step,
                "job_last_step": self.job_last_step}


@dataclass(frozen=True, slots=True)
class StragglerReport:
    """The analysis of one job.

    ``noise`` is the robust per-rank step-to-step noise (1.4826 x MAD of the log-ratio to the
    peer median, a fraction: 0.02 = 2 %); ``grouping`` says how peers were chosen; ``warnings``
    lists every input problem that was repaired or skipped (never silent)."""

    suspects: tuple[Suspect, ...]
    stopped: tuple[StoppedRank, ...]
    warnings: tuple[str, ...]
    ranks: int
    steps: int
    first_step: int
    last_step: int
    job_gpus: int
    grouping: str
    groups: int
    noise: float
    bases: tuple[Basis, ...]
    design: Design
    min_slowdown: float = 0.0
    slowest: tuple[SlowGpu, ...] = ()
    below_floor: int = 0  # alarms whose slowdown was below ``min_slowdown`` (not suspects)
    workload: WorkloadImbalance | None = None
    job_level: tuple[JobChange, ...] = ()
    data_limits: tuple[str, ...] = ()
    segments: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "suspects": [s.to_json() for s in self.suspects],
            "stopped": [s.to_json() for s in self.stopped],
            "warnings": list(self.warnings),
            "ranks": self.ranks, "steps": self.steps, "first_step": self.first_step,
            "last_step": self.last_step, "job_gpus": self.job_gpus, "grouping": self.grouping,
            "groups": self.groups, "noise": _r(self.noise), "bases": [b.value for b in self.bases],
            "design": self.design.to_json(),
            "min_slowdown": self.min_slowdown, "below_floor_alarms": self.below_floor,
            "slowest": [s.to_json() for s in self.slowest],
            "workload": None if self.workload is None else self.workload.to_json(),
            "job_level": [c.to_json() for c in self.job_level],
            "data_limits": list(self.data_limits),
            "segments": list(self.segments),
        }


def _r(x: float, nd: int = 4) -> float | None:
    return None if not math.isfinite(x) else round(float(x), nd)

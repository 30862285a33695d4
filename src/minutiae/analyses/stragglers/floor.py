"""The actionable floor (``--min-slowdown``) and the list of slowest GPUs below it.

A persistent offset of 1-2 % between GPUs of one model is normal (the silicon lottery, power and
thermal limits: measured GPU-to-GPU spreads of ~1 % sd), and a wandering GPU (power capping,
AR(1) with phi 0.9-0.97) drifts 1-2 % for tens of steps. Both are real, both are detectable
over enough steps, neither is a fault anyone would replace hardware for. The floor (default
3 %) is what a suspect must reach: its estimate at least ``KEEP_SHARE`` of the floor and its
95 % interval reaching the floor. Below it, the slowest GPUs are listed by their slowdown over
every step tested, with what they cost the job, for the replace-or-not question.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from minutiae.analyses.stragglers.detect import SeriesDetector
from minutiae.analyses.stragglers.locate import RankMeta
from minutiae.analyses.stragglers.specfun import normal_quantile
from minutiae.analyses.stragglers.types import Scope, SlowGpu, Suspect

DEFAULT_MIN_SLOWDOWN = 0.03
#: a suspect's point estimate must reach this share of the floor (its interval the floor)
KEEP_SHARE = 0.8
SLOWEST_LISTED = 10
#: suspects below NEAR floors must still be slower by STILL_SHARE of the floor at the end
NEAR = 2.0
STILL_SHARE = 0.5
#: the spread a from-start offset is judged against is its upper bound at this confidence
SPREAD_LEVEL = 0.95
#: a MAD's variance is a standard deviation's on this share of the degrees of freedom
MAD_DF_SHARE = 0.37


def size(s: Suspect, held: bool = True) -> float:
    """A suspect's slowdown for the floor: its mean since onset, or the size it held when
    found if larger (a transient fault averages out after it ends): its excursion's mean less
    its largest step (``held.py``). A test that alarms on the step its excursion began was
    pushed over by one step (a Student-t tail or a GC pause on a rank already near its
    threshold), which is no fault's size (measured on the simulator's week: 9 of 39 GPU alarms
    of MoE jobs had a one-step "size when found" of 28-50 % and +3-6 % since), nor is one such
    step in a mean of two (job 100196: +27.9 % and +8.5 %, "+20.7 % when found"): such a
    suspect's size is its mean since onset without that step (``s.after``; none when no step
    followed, so it waits for the next). Measured on the week once the noise fit stopped taking
    the lottery for phi 0.99 wander: a +34 % GC pause on the second-to-last logged step of job
    101126, on a rank whose mild excess had filled the slow test, was "+20.9 % since".
    ``held=False``: the excursion's whole mean (``moving.py``'s evidence of moving work)."""
    one_step = s.detected_step <= s.since_step
    if not held:
        return max(s.slowdown, s.peak) if np.isfinite(s.peak) and not one_step else s.slowdown
    if one_step:
        return min(s.slowdown, s.after) if np.isfinite(s.after) else float("nan")
    return max(s.slowdown, s.held) if np.isfinite(s.held) else s.slowdown


def spread(det: SeriesDetector) -> float:
    """The spread of a test's units (the GPUs', or the nodes' for the node test): 1.4826 x MAD
    across them of each one's mean log-ratio over every step tested (the silicon lottery plus
    what noise leaves in a mean)."""
    ok = det.total_n >= 1
    m = det.total_r[ok] / det.total_n[ok]
    return float(1.4826 * np.median(np.abs(m - np.median(m)))) if m.size >= 8 else 0.0


def before_onset(det: SeriesDetector) -> tuple[np.ndarray, np.ndarray]:
    """Per rank: its mean log-ratio over every step tested before its alarm's onset (every
    step's sum less its excursion's, both kept to the end), and how many; NaN for a rank that
    has not alarmed (a node suspect's ranks may not have)."""
    n = det.total_n - det.alarm_sums[1]
    mean = (det.total_r - det.alarm_sums[0]) / np.maximum(n, 1.0)
    return np.where(det.alarm_step >= 0, mean, np.nan), n


@dataclass(frozen=True, slots=True)
class OwnOffset:
    """Per rank (``index``: rank -> column): the offset credited to it (``credit``) and that
    estimate's variance (``var``), both as log-ratios."""

    credit: np.ndarray
    var: np.ndarray
    index: dict[int, int]

    def __call__(self, s: Suspect) -> float:
        """A suspect's offset: the median over its ranks."""
        return float(np.median(self.credit[self._cols(s)]))

    def variance(self, s: Suspect) -> float:
        """That median's variance: one rank's, or pi/2 x the median of its ranks' over their
        count."""
        v = self.var[self._cols(s)]
        return float(v[0]) if v.size == 1 else float(np.pi / 2 * np.median(v) / v.size)

    def _cols(self, s: Suspect) -> list[int]:
        return [self.index[r] for r in s.ranks]


def own_offset(warm: np.ndarray, var: np.ndarray, index: dict[int, int],
               pre: tuple[np.ndarray, np.ndarray, int] | None = None) -> OwnOffset:
    """A suspect's offset in its own warm-up (the median over its ranks), for judging what is
    new. A positive offset counts in full (what a GPU already had is never blamed on it). A
    negative one (it was faster) is credited only as far as the job's ranks have persistent
    offsets at all: shrunk by ``k = tau^2 / (tau^2 + var)``, ``tau^2`` the spread of the warm-up
    offsets across ranks less what their estimates' own noise ``var`` explains (empirical
    Bayes). Without a lottery a warm-up that happened to run fast is noise, and a 2 % fault
    stays a 2 % fault; with a 0.7 % lottery most of a GPU's head start is real. The credit's
    variance is its estimate's (``k`` times it when shrunk): ``above_floor`` widens a
    suspect's interval by it, since what is new is a difference of two estimates.

    ``pre`` (per rank: the mean log-ratio over every step tested before its alarm's onset, how
    many, and the warm-up's steps) stands in for the warm-up where it has more steps: a
    warm-up of 20 steps at 3 % noise knows a GPU's offset to ~0.8 %, so a GPU whose 3.6 %
    lottery the warm-up read as 2.5 % became "1.1 % slower than it was" once its mean since
    an onset dated later was read (the simulator's week: 26 such false alarms); the steps up to
    its onset say what it had. A mean, like the suspect's slowdown since onset, so what comes
    on some steps only (a hot expert's turns) is in both and cancels."""
    mad = 1.4826 * float(np.median(np.abs(warm - np.median(warm)))) if warm.size else 0.0
    tau2 = max(mad * mad - float(np.median(var)) if var.size else 0.0, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        shrink = np.where(tau2 + var > 0, tau2 / (tau2 + var), 0.0)
    credit = np.where(warm > 0, warm, warm * shrink)
    cvar = np.where(warm > 0, var, var * shrink)
    if pre is not None:
        mean, n, steps = pre
        more = np.isfinite(mean) & (n > steps)
        with np.errstate(invalid="ignore", divide="ignore"):
            v = var * steps / np.maximum(n, 1.0)  # the offset's variance, ~1 / steps
            k = np.where(tau2 + v > 0, tau2 / (tau2 + v), 0.0)
        credit = np.where(more, np.where(mean > 0, mean, mean * k), credit)
        cvar = np.where(more, np.where(mean > 0, v, v * k), cvar)
    return OwnOffset(credit, cvar, index)


@dataclass(frozen=True, slots=True)
class StartOffsets:
    """What offsets present since the data starts reach in this job without a fault: the
    spread of the GPUs' (``gpu``) and nodes' (``node``) mean ratios over every step tested,
    and how many spreads the largest of ``gpus`` (``nodes``) normal offsets passes with
    probability ``p`` (the job's share of the false-alarm budget: ``budget``)."""

    gpu: float
    node: float | None
    gpus: int
    nodes: int
    p: float

    @staticmethod
    def of(gpu: float, node: float | None, gpus: int, nodes: int, per_1000_node_days: float,
           node_days: float) -> StartOffsets:
        """``per_1000_node_days``: the false-alarm target; ``node_days``: the data's."""
        return StartOffsets(gpu, node, gpus, nodes,
                            min(0.5, per_1000_node_days / 1000.0 * max(node_days, 1e-9)))

    def need(self, s: Suspect, floor: float) -> float:
        """The slowdown a suspect present from the start must reach: the floor, and the tail
        of its kind's offsets (a node against the nodes' spread, a GPU against the upper
        confidence bound of the GPUs': ``spread_bound``)."""
        node = s.scope is Scope.NODE and self.node is not None
        spread, units = (self.node, self.nodes) if node else (self.gpu, self.gpus)
        z = normal_quantile(1.0 - self.p / max(units, 1))
        # the GPUs' spread at its upper bound; the nodes' (a handful in a small job) as read
        bound = 1.0 if node else spread_bound(units)
        return max(floor, float(np.expm1(z * float(spread or 0.0) * bound)))


def spread_bound(units: int) -> float:
    """How far above a ``spread`` (1.4826 x MAD of ``units`` values) the true spread may be: the
    ratio of its one-sided ``SPREAD_LEVEL`` upper confidence bound to the estimate. A MAD has
    the variance of a standard deviation on ``MAD_DF_SHARE`` of the degrees of freedom
    (asymptotic relative efficiency 0.37 for normal data: Rousseeuw & Croux 1993, JASA 88:1273),
    so ``nu = MAD_DF_SHARE x (units - 1)`` and the bound is ``sqrt(nu / chi2_(1-level)(nu))``,
    the chi-square quantile by Wilson & Hilferty (1931). 32 GPUs (a 4-node job): x1.5; 1,024:
    x1.06. A small job's spread is the tail's scale, and an estimate that came out low by
    chance (measured on the simulator's week: 4-node jobs whose GPU lottery of +3.8 to +4.7 %
    passed the tail of a spread read from 32 GPUs) must not make a lottery offset a fault."""
    nu = MAD_DF_SHARE * max(units - 1, 1)
    h = 2.0 / (9.0 * nu)
    lo = nu * (1.0 - h + normal_quantile(1.0 - SPREAD_LEVEL) * np.sqrt(h)) ** 3
    return float(np.sqrt(nu / lo)) if lo > 0 else float("inf")


def above_floor(suspects: list[Suspect], floor: float, warm_end: int,
                start: StartOffsets, still: Callable[[Suspect], float] | None = None,
                offset: OwnOffset | None = None,
                level: Callable[[Suspect], float] | None = None,
                whole: Callable[[Suspect], Suspect] | None = None,
                ) -> tuple[list[Suspect], int]:
    """The suspects that reach the floor, and how many alarms did not.

    A slowdown present since the data starts (``since_step`` up to ``warm_end``, the last
    warm-up step number) is an offset like the lottery's: its estimate must reach what the
    largest of the job's normal offsets reaches within the job's share of the false-alarm
    budget (``StartOffsets.need``: with 1,024 GPUs and a 1 % spread, ~5.5 %), so the
    lottery's tail is listed, not blamed, while a node or GPU slow from step 0 by more than
    that is found. A later one is judged on what is new, against its own warm-up:
    its size and interval less ``offset(s)``, the median ratio its ranks had in the warm-up (a
    GPU 1.5 % behind by its lottery and 2 % more by a wander is 2 % slower than it was; one 1 %
    ahead by its lottery that is now 2 % behind its peers is 3 % slower than it was); the
    interval is widened by the offset's own uncertainty (``OwnOffset.variance``: a +3.0 % fault
    on a real training loop read +3.0 % (interval to +3.26 %) less a warm-up offset of 0.31 %
    that was noise, and was dropped for an interval that ignored it). Within
    ``NEAR`` floors it must still be slow: ``still(s)`` (its mean log-ratio over its last
    steps) less that offset at least ``STILL_SHARE`` of the floor (a wandering GPU drifts to the
    floor and back; a faulty one stays). Within ``NEAR`` floors a GPU's size is also at most
    ``level(s)`` (``moving.level``: the median of its log-ratios since its onset): slowness
    that comes on some steps only (a hot expert's turns on each rank of its group) lifts a mean,
    a hardware slowdown lifts every step.

    A later suspect that is not slower than it was may have been slow all along, its onset
    dated late by noise (a GPU +4 % from step 0 under 5 % noise: alarms dated at steps 25-270,
    its steps before them as slow, so nothing "new": 14 of 40 such jobs lost it). ``whole(s)``
    re-dates it to the first step with its mean over every step tested, and it is judged as
    any slowdown present from the start is (``StartOffsets.need``): a lottery offset that
    alarmed late still meets the lottery's tail."""
    if floor <= 0:
        return suspects, 0

    def robust(s: Suspect, est: float, shift: float, need: float) -> float:
        """``est`` capped by the suspect's median level (less ``shift``) when it is near."""
        if level is None or est >= NEAR * need:
            return est
        lv = level(s)
        return min(est, float(np.expm1(lv - shift))) if np.isfinite(lv) else est

    def from_start(s: Suspect) -> bool:
        need = start.need(s, floor)
        return robust(s, s.slowdown, 0.0, need) >= need

    def judged(s: Suspect) -> Suspect | None:
        if s.since_step <= warm_end:
            return s if from_start(s) else None
        if ok(s):
            return s
        w = whole(s) if whole is not None else None
        return w if w is not None and from_start(w) else None

    def ok(s: Suspect) -> bool:
        need = floor
        # a transient fault (a 30 % fail-slow for 20 minutes of a long job) averages out
        # below the floor after it ends: its size when found counts too
        # judged against its own warm-up: what it had then (its lottery, either way) is not
        # new, and a GPU that was 1 % ahead and is now 2 % behind slowed by 3 %
        shift = offset(s) if offset is not None else 0.0
        big = robust(s, float(np.expm1(np.log1p(size(s)) - shift)), shift, need)
        high = float(np.expm1(widened(s, shift, offset.variance(s) if offset is not None else 0.0)))
        if still is not None and big < NEAR * need and not (
                still(s) - shift >= STILL_SHARE * float(np.log1p(floor))):
            return False
        return big >= KEEP_SHARE * need and max(high, big) >= need

    keep = [k for k in map(judged, suspects) if k is not None]
    return keep, len(suspects) - len(keep)


def whole_run(det: SeriesDetector, index: dict[int, int], first: int
              ) -> Callable[[Suspect], Suspect]:
    """A suspect re-dated to step ``first``: its slowdown the median over its ranks of each
    one's mean log-ratio over every step tested, with that mean's interval (``mean_se``)."""
    def of(s: Suspect) -> Suspect:
        cols = np.array([index[r] for r in s.ranks], dtype=np.int64)
        n = np.maximum(det.total_n[cols], 1.0)
        mean = float(np.median(det.total_r[cols] / n))
        se = float(np.median(det.noise.mean_se(cols, n)))
        return replace(s, since_step=first, slowdown=float(np.expm1(mean)),
                       ci_low=float(np.expm1(mean - 1.96 * se)),
                       ci_high=float(np.expm1(mean + 1.96 * se)))
    return of


def widened(s: Suspect, shift: float, var: float) -> float:
    """The upper end of a suspect's 95 % interval as a log-ratio, less ``shift`` (an offset
    estimated with variance ``var``): the half-width is ``1.96 sqrt(se^2 + var)``, ``se`` the
    slowdown's own standard error (its interval's upper half-width over 1.96)."""
    mid = float(np.log1p(s.slowdown))
    se = max(float(np.log1p(s.ci_high)) - mid, 0.0) / 1.96
    return mid - shift + 1.96 * float(np.sqrt(se * se + max(var, 0.0)))


def slowest(meta: RankMeta, det: SeriesDetector, share: float, job_gpus: int,
            exclude: set[int], rho: float) -> tuple[SlowGpu, ...]:
    """The ``SLOWEST_LISTED`` slowest ranks that are not suspects (positive slowdown only).
    The interval widens the independent-steps standard error by ``sqrt((1 + rho) / (1 - rho))``
    (the AR(1) long-run factor, ``rho`` the warm-up's lag-1 autocorrelation)."""
    n = np.maximum(det.total_n, 1.0)
    mean = det.total_r / n
    mean[det.total_n < 1] = -np.inf
    if exclude:
        mean[[i for i in range(mean.size) if int(meta.ranks[i]) in exclude]] = -np.inf
    order = np.argsort(-mean, kind="stable")[:SLOWEST_LISTED]
    widen = float(np.sqrt((1.0 + rho) / (1.0 - rho))) if -1.0 < rho < 1.0 else 1.0
    out = []
    for i in order.tolist():
        m = float(mean[i])
        if not m > 0:
            break
        se = float(det.sigma[i]) / float(np.sqrt(n[i])) * widen
        node = meta.node[i]
        gpu = int(meta.gpu[i]) if meta.gpu[i] >= 0 else None
        comp = (f"rank:{int(meta.ranks[i])}" if node is None
                else f"gpu:{node}/{gpu}" if gpu is not None else f"gpu:{node}/rank{int(meta.ranks[i])}")
        job = float(np.expm1(m)) * share
        out.append(SlowGpu(int(meta.ranks[i]), node, gpu, comp, float(np.expm1(m)),
                           float(np.expm1(m - 1.96 * se)), float(np.expm1(m + 1.96 * se)),
                           job, job * job_gpus * 24))
    return tuple(out)


def lag1(r: np.ndarray) -> float:
    """Pooled lag-1 autocorrelation of each rank's warm-up ratios (each rank demeaned; NaN
    ignored; 0 when too short)."""
    if r.shape[0] < 4:
        return 0.0
    x = r - np.nanmean(r, axis=0, keepdims=True)
    a, b = x[1:], x[:-1]
    ok = np.isfinite(a) & np.isfinite(b)
    num = float(np.sum(np.where(ok, a * b, 0.0)))
    den = float(np.sum(np.where(ok, a * a, 0.0)))
    return max(min(num / den, 0.99), 0.0) if den > 0 else 0.0

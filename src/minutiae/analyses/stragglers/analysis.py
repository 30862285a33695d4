"""Straggler detection in a synchronous job: compare every rank with the peers doing the same
work, run a sequential test per rank, locate and cost what it finds.

Pipeline: ``stragglers_prep.prepare`` (long table -> dense matrices, every repair reported) ->
``StragglerAnalysis`` (calibrate on the first ``warmup`` steps: peer groups, robust noise,
thresholds from the false-alarm target; then ``update`` block by block or step by step) ->
``report`` (``stragglers_locate``: rank -> GPU -> node -> leaf; slowdown with a 95 % interval;
cost in GPU-hours per day). ``analyse`` is the whole-file form; ``--follow`` feeds the same
object one step at a time.

Collective wait: with section timings, ``compute`` is the step minus its collective sections
(the slow rank is the one that waits least, so its compute stands out), and each rank's own
communication time is its collective time minus the wait for the slowest peer of its group
(``max_group(compute) - compute``). With only step totals, ``seconds`` is taken as the rank's
own work (as StepTimer records when sections are not used: say so in the job).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from minutiae.analyses.stragglers.armodel import ArModel
from minutiae.analyses.stragglers.calib import (
    MIN_SPIKE_STEPS,
    NOISE_FLOOR,
    design,
    infer_groups,
)
from minutiae.analyses.stragglers.detect import SeriesDetector
from minutiae.analyses.stragglers.floor import (
    DEFAULT_MIN_SLOWDOWN,
    StartOffsets,
    above_floor,
    before_onset,
    lag1,
    own_offset,
    slowest,
    spread,
    whole_run,
)
from minutiae.analyses.stragglers.jobseries import JobSeries, wait_included
from minutiae.analyses.stragglers.layout import Layout
from minutiae.analyses.stragglers.locate import RankMeta, locate
from minutiae.analyses.stragglers.medians import fast_median
from minutiae.analyses.stragglers.moving import level, split_moving, still_slow
from minutiae.analyses.stragglers.nodes import NodeLayout
from minutiae.analyses.stragglers.peers import PeerReference
from minutiae.analyses.stragglers.prep import TimingMatrix, log_times
from minutiae.analyses.stragglers.types import (
    Basis,
    Design,
    StoppedRank,
    StragglerReport,
    Suspect,
)
from minutiae.analyses.stragglers.whiten import NoiseFit, calibrate, inflate
from minutiae.errors import DataError

MIN_RANKS = 2
#: standard errors of a self-baseline's offset subtracted from each increment of its tests
BIAS_Z = 3.0
DEFAULT_RANKS_PER_NODE = 8
MAX_WARNINGS = 50
BLOCK_CELLS = 1 << 18


@dataclass(frozen=True, slots=True)
class Options:
    """``warmup``: steps used to calibrate; ``false_alarms``: target per 1,000 node-days;
    ``stopped_after``: steps without a row before a rank counts as stopped (in units of the
    rank's own logging interval); ``min_slowdown``: the floor a suspect must reach
    (``floor.py``); ``layout``: the parallel layout (``layout.py``; None: inferred)."""

    warmup: int = 20
    false_alarms: float = 0.1
    ranks_per_node: int | None = None
    stopped_after: int = 3
    block: int = 64
    min_slowdown: float = DEFAULT_MIN_SLOWDOWN
    layout: Layout | None = None


def _members(groups: np.ndarray) -> list[np.ndarray]:
    return [np.flatnonzero(groups == g) for g in range(int(groups.max()) + 1)]


def _series(noise: NoiseFit, groups: np.ndarray, d: Design, peers: PeerReference | None,
            offset_se: np.ndarray, fallback: ArModel | None = None) -> SeriesDetector:
    """The test of one timing series from its calibration: the innovations' noise inflated for
    its own error, and the self-baseline's bias allowance (``BIAS_Z`` standard errors of the
    offset, of which the innovations keep the model's ``passes``)."""
    sig = inflate(noise.sigma, noise.count, d)
    allowance = BIAS_Z * noise.model.passes() * offset_se / sig[groups]
    tail = (noise.innovations / noise.sigma[groups[noise.cols]]).ravel()
    return SeriesDetector(groups, sig, d, peers, allowance, noise.model,
                          None if noise.model.white else noise.ratio_sigma, tail, fallback)


def _group_max(x: np.ndarray, groups: np.ndarray, members: list[np.ndarray]) -> np.ndarray:
    out = np.empty_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for cols in members:
            out[:, cols] = np.nanmax(x[:, cols], axis=1)[:, None]
    return out


class StragglerAnalysis:
    """Calibrated on ``warm`` (the first steps); then ``update`` with later steps in order."""

    def __init__(self, warm: TimingMatrix, options: Options = Options(), where: str = "") -> None:
        n_r = warm.ranks.size
        if n_r < MIN_RANKS:
            raise DataError(f"{n_r} rank(s): at least {MIN_RANKS} are needed to compare ranks "
                            "(a Megatron log needs --timing-log-option all for per-rank times)",
                            where or None)
        if warm.steps.size < 3:
            raise DataError(f"only {warm.steps.size} step(s): at least 3 are needed", where or None)
        self.options = options
        self.where = where
        self.warnings = list(warm.warnings)
        self.basis = warm.basis
        self.meta = RankMeta(warm.ranks, warm.node, warm.gpu, warm.leaf)
        self.groups, self.grouping = self._groups(warm)
        self.members = _members(self.groups)
        self.peers = PeerReference(self.groups, self._units(warm))
        warm_logx = log_times(warm.compute)
        r_warm, node_warm = self.peers.fit(warm_logx)
        self.rho = lag1(r_warm)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            self.warm_offset = np.nan_to_num(np.nanmedian(r_warm, axis=0))
        self.warm_steps = max(int(r_warm.shape[0]), 1)
        noise = calibrate(r_warm, self.groups, self.members)
        spikes = noise.spikes
        rpn = options.ranks_per_node or self._ranks_per_node(warm)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            step_s = float(np.nanmedian(warm.total))
        if not np.isfinite(step_s) or step_s <= 0:
            raise DataError("no positive step durations in the first steps", where or None)
        self.has_comm = warm.comm is not None
        self.layout = NodeLayout.of(warm.node)
        bases = 1 + int(self.has_comm) + int(self.layout is not None)
        # a log that keeps one step in N is tested once per N steps: the budget is per node-day,
        # so each test may spend N times the per-step share (the tests are what can alarm)
        gaps = np.diff(warm.steps)
        every = max(int(np.median(gaps)), 1) if gaps.size else 1
        self.design = design(options.false_alarms, step_s, rpn, bases, spikes, every)
        m = self.design.detectors[0].steps_at_clip
        if m > MIN_SPIKE_STEPS:
            self.warnings.append(
                f"one-step spikes (GC, loader) on {spikes[0]} of {spikes[1]} rank-steps of the "
                f"warm-up: the fast test needs {m} steps at its clip to stay within "
                f"{options.false_alarms} false alarms per 1,000 node-days (large slowdowns are "
                f"found after {m} steps instead of {MIN_SPIKE_STEPS})")
        self.compute = _series(noise, self.groups, self.design, self.peers,
                               self.peers.offset_error())
        self.compute.noise.use_units(self._units(warm) * (int(self.groups.max()) + 1) + self.groups)
        self.noise = float(np.median(self.compute.sigma))
        self.nodes: SeriesDetector | None = None
        if self.layout is not None:
            assert node_warm is not None
            node_r = self.layout.medians(node_warm)
            one = np.zeros(len(self.layout.names), dtype=np.int64)
            off_se = self.peers.offset_error(node=True)
            node_se = np.array([off_se[idx].max() for idx in self.layout.members])
            # a few nodes over the warm-up are too thin to fit a model of their own: the rank
            # tests' model stands in until the job has given enough (``armodel.MIN_DIFFS``)
            rank_model = self.compute.noise.model
            self.nodes = _series(calibrate(node_r, one, [np.arange(one.size)], NOISE_FLOOR / 2,
                                           rank_model), one, self.design, None, node_se,
                                 rank_model)
        self.comm: SeriesDetector | None = None
        if warm.comm is not None:
            own = self._own_comm(warm)
            own_logx = log_times(own)
            self.comm_peers = PeerReference(self.groups, self._units(warm))
            cnoise = calibrate(self.comm_peers.fit(own_logx)[0], self.groups, self.members)
            self.comm = _series(cnoise, self.groups, self.design, self.comm_peers,
                                self.comm_peers.offset_error())
        self._job_level(warm)

    def _job_level(self, warm: TimingMatrix) -> None:
        """The whole job's series, what the data cannot show, and the 2-rank self-baseline."""
        self.steps_seen: list[np.ndarray] = []
        self.total_medians: list[float] = []
        self.series = JobSeries()
        #: 2-rank jobs: each rank's own log compute time (the self-baseline says which changed)
        self.pair: list[tuple[np.ndarray, np.ndarray]] | None = (
            [] if warm.ranks.size == 2 else None)
        if self.pair is not None:
            self.warnings.append(
                "2 ranks: each is compared with the other and with its own history (a suspect's "
                "own step time must have risen since the warm-up; otherwise the other rank got "
                "faster, which is not a fault)")
        self.data_limits: list[str] = []
        waits = wait_included(warm.total) if warm.basis is Basis.STEP else None
        if waits is not None:
            self.data_limits.append(
                f"these step times include collective waits (ranks agree within "
                f"{waits[0]:.2%} while the job's step time varies {waits[1]:.2%} step to step): "
                "per-rank compute cannot be compared, so no rank can be blamed; record sections "
                "(StepTimer with a collective section, or per-rank forward/backward timers) to "
                "find stragglers. The job-level step-time series is still analysed")
            self.warnings.append(self.data_limits[-1])

    def _groups(self, warm: TimingMatrix) -> tuple[np.ndarray, str]:
        lay = self.options.layout
        if lay is not None and lay.fits(warm.ranks, warm.stage, warm.node, self.where or None,
                                        self.warnings):
            groups, how = lay.stages(warm.ranks), f"by {lay.origin} {lay.text()}"
        elif warm.stage is not None:
            groups, how = warm.stage, "by stage column"
        else:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                logx = np.log(warm.compute)
                levels = np.nanmedian(logx - np.nanmedian(logx, axis=1, keepdims=True), axis=0)
            named = [x for x in warm.node if x is not None]
            per_node = (int(np.median(np.unique(np.array(named), return_counts=True)[1]))
                        if len(named) == len(warm.node) and named else None)
            groups, how = infer_groups(levels, ranks_per_node=per_node)
        _, groups = np.unique(groups, return_inverse=True)
        return groups.astype(np.int64), how

    @staticmethod
    def _units(warm: TimingMatrix) -> np.ndarray:
        """Node index of every rank (a rank without a node is its own unit)."""
        names = [n if n is not None else f"\0rank{i}" for i, n in enumerate(warm.node)]
        return np.unique(np.array(names, dtype=object).astype(str), return_inverse=True)[1]

    def _ranks_per_node(self, warm: TimingMatrix) -> int:
        nodes = [n for n in warm.node if n is not None]
        if not nodes:
            self.warnings.append(f"no node column: {DEFAULT_RANKS_PER_NODE} ranks per node "
                                 "assumed for the false-alarm budget")
            return DEFAULT_RANKS_PER_NODE
        _, counts = np.unique(np.array(nodes), return_counts=True)
        return max(int(np.median(counts)), 1)

    def _own_comm(self, m: TimingMatrix) -> np.ndarray:
        assert m.comm is not None
        wait = _group_max(m.compute, self.groups, self.members) - m.compute
        own = m.comm - wait
        return np.where(own > 0, own, np.nan).astype(np.float32)

    def update(self, m: TimingMatrix) -> int:
        """Test the steps of ``m``; returns how many ranks alarmed for the first time."""
        if m.ranks.size != self.meta.ranks.size or not np.array_equal(m.ranks, self.meta.ranks):
            raise DataError("rank set changed after calibration", self.where or None)
        for w in m.warnings:
            if w not in self.warnings and len(self.warnings) < MAX_WARNINGS:
                self.warnings.append(w)
        if m.steps.size == 0:
            return 0
        r = self.compute.ratios(m.compute, node=self.nodes is not None)
        fresh = 0
        if self.nodes is not None and self.layout is not None:
            node_r = self.compute.node_ratios
            assert node_r is not None
            fresh += self.nodes.update_ratio(self.layout.medians(node_r), m.steps).size
        fresh += self.compute.update_ratio(r, m.steps).size
        self.series.add(m.steps, "step", m.total)
        if self.pair is not None:
            self.pair.append((m.steps, log_times(m.compute)))
        if self.comm is not None and m.comm is not None:
            own = self._own_comm(m)
            self.series.add(m.steps, "communication", own)
            self.series.add(m.steps, "compute", m.compute)
            fresh += self.comm.update(own, m.steps).size
        self.steps_seen.append(m.steps)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            stride = max(1, m.total.shape[1] // 4096)  # the typical step: a sample is enough
            sample = m.total[:, ::stride]
            med = fast_median(sample, axis=1)
            self.total_medians.extend(med.tolist())
        return fresh

    def _own_history(self, suspects: list[Suspect]) -> list[Suspect]:
        """2-rank jobs: keep a suspect only if its own time rose by half its slowdown."""
        if not self.pair or not suspects:
            return suspects
        steps = np.concatenate([s for s, _ in self.pair])
        logx = np.concatenate([x for _, x in self.pair])
        keep = []
        for s in suspects:
            i = int(np.flatnonzero(self.meta.ranks == s.rank)[0])
            rise = _own_rise(steps, logx, i, s.since_step, self.options.warmup)
            if rise >= 0.5 * np.log1p(s.slowdown):
                keep.append(s)
            else:
                self.warnings.append(
                    f"rank {s.rank} is {s.slowdown:+.1%} relative to the other rank since step "
                    f"{s.since_step} but its own step time rose only {np.expm1(rise):+.1%}: "
                    "the other rank got faster (not a suspect)")
        return keep

    def _start_offsets(self, tested: int) -> StartOffsets:
        """The spreads offsets present from the start are judged against, and the job's
        node-days so far (its share of the false-alarm budget)."""
        d = self.design
        n = self.meta.ranks.size
        node_days = tested * d.logged_every * d.step_seconds * n / d.ranks_per_node / 86_400.0
        nodes = self.layout.names if self.layout is not None else []
        return StartOffsets.of(spread(self.compute),
                               spread(self.nodes) if self.nodes is not None else None,
                               n, len(nodes), self.options.false_alarms, node_days)

    def _offset_var(self) -> np.ndarray:
        """Per rank, the variance of its warm-up offset's estimate (a median of the warm-up's
        ratios: pi/2 x the variance of their mean, the AR part included)."""
        n = self.warm_steps
        noise = self.compute.noise
        return np.pi / 2 * noise.ratio_sigma ** 2 * float(noise.model.sum_var(np.array(n))) / n ** 2

    def report(self) -> StragglerReport:
        steps = np.concatenate(self.steps_seen) if self.steps_seen else np.zeros(0, np.int64)
        total = float(np.nanmedian(self.total_medians)) if self.total_medians else float("nan")
        comp_share = min(self.compute.typical_seconds() / total, 1.0) if total > 0 else 1.0
        comm_share = (min(self.comm.typical_seconds() / total, 1.0)
                      if self.comm is not None and total > 0 else 0.0)
        n = self.meta.ranks.size
        nodes = None
        if self.nodes is not None and self.layout is not None:
            nodes = (self.layout.names, self.layout.members, self.nodes.alarms())
        suspects = locate(self.meta, self.compute.alarms(),
                          self.comm.alarms() if self.comm is not None else None, self.basis,
                          (comp_share, comm_share), n, nodes)
        first = int(steps[0]) if steps.size else 0
        index = {int(r): i for i, r in enumerate(self.meta.ranks.tolist())}
        rows = self.compute.recent_rows()
        # moving first: a recovered hot spot is evidence of the pattern, whatever its size
        suspects, workload = split_moving(suspects, rows, index, steps,
                                          self.options.min_slowdown, self.compute.recovery.low)
        suspects = self._own_history(suspects)
        # an onset before the steps after the warm-up outnumber it is judged as present from the
        # start: its offset is known from the warm-up alone (``own_offset``), which cannot tell
        # an onset from a persistent offset (a log keeping one step in N numbers them N apart)
        warm_end = int(steps[min(2 * self.options.warmup, steps.size) - 1]) if steps.size else first
        suspects, below = above_floor(suspects, self.options.min_slowdown, warm_end,
                                      self._start_offsets(steps.size),
                                      still_slow(rows, index),
                                      own_offset(self.warm_offset, self._offset_var(), index,
                                                 (*before_onset(self.compute), self.warm_steps)),
                                      level(rows, index, steps),
                                      whole_run(self.compute, index, first))
        listed = slowest(self.meta, self.compute, comp_share, n,
                         {r for s in suspects for r in s.ranks}, self.rho)
        stopped = []
        if steps.size:
            last = self.compute.last_step
            after = steps.size - np.searchsorted(steps, last, side="right")
            # a rank that logs one step in k (sparse logging) is stopped after k x stopped_after
            every = np.maximum(np.round(steps.size / np.maximum(self.compute.total_n, 1)), 1)
            gone = (last >= 0) & (after >= self.options.stopped_after * every)
            for i in np.flatnonzero(gone).tolist():
                stopped.append(StoppedRank(int(self.meta.ranks[i]), self.meta.node[i],
                                           int(last[i]), int(steps[-1])))
            silent = np.flatnonzero(last < 0)
            if silent.size:
                self.warnings.append(f"{silent.size} rank(s) never had a usable duration")
        bases = (self.basis,) + ((Basis.COMMUNICATION,) if self.comm is not None else ())
        return StragglerReport(
            suspects=tuple(suspects), stopped=tuple(stopped), warnings=tuple(self.warnings),
            ranks=n, steps=int(steps.size), first_step=int(steps[0]) if steps.size else -1,
            last_step=int(steps[-1]) if steps.size else -1, job_gpus=n, grouping=self.grouping,
            groups=len(self.members), noise=self.noise, bases=bases, design=self.design,
            min_slowdown=self.options.min_slowdown, slowest=listed, below_floor=below,
            workload=workload, job_level=self.series.changes(),
            data_limits=tuple(self.data_limits))


def _own_rise(steps: np.ndarray, logx: np.ndarray, i: int, since: int, warmup: int) -> float:
    """How much rank ``i``'s own log time rose from its warm-up to the steps since ``since``,
    beyond what the other rank's did (a job-wide change moves both)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        before = np.nanmedian(logx[:warmup], axis=0)
        after = np.nanmedian(logx[steps >= since], axis=0)
    rise = after - before
    return float(rise[i]) if np.isfinite(rise[i]) else 0.0


def analyse(m: TimingMatrix, options: Options = Options(), where: str = "") -> StragglerReport:
    """The whole-file analysis: calibrate on the first ``warmup`` steps, then test every step."""
    analysis = StragglerAnalysis(m.slice(0, options.warmup), options, where)
    # blocks of about BLOCK_CELLS samples: a small job is tested in one or two blocks (each
    # block has a fixed cost), a large one in blocks of ``options.block`` steps
    block = max(options.block, BLOCK_CELLS // max(m.ranks.size, 1))
    for start in range(0, m.steps.size, block):
        analysis.update(m.slice(start, start + block))
    return analysis.report()

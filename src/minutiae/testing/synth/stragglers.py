"""Synthetic step timings of a synchronous job with known truth (for tests and benchmarks).

Vectorised numpy, generated block by block (``SynthJob.blocks``) so 100,000 ranks x 1,000
steps never needs more than a block of steps in memory. What is modelled, per rank and step:

- compute time = base x pipeline-stage factor (stages have different mean times: *not* a fault)
  x diurnal drift (shared) x checkpoint steps (shared, every ``checkpoint_every`` steps)
  x log-normal per-rank jitter (``noise``) x sequence-length variance shared by the ranks of one
  data-parallel replica (``seqlen``), plus rare GC pauses and data-loader hiccups (one-step spikes);
- the all-reduce section = collective wait (the slowest compute of the stage group minus this
  rank's compute: fast ranks wait, the slow one waits least) + the rank's own transfer time;
- injected faults (``Fault``): one GPU slower in compute, all GPUs of a node slower, or the
  nodes under one leaf switch slower in communication only.

Rank layout: rank r is GPU ``r % gpus_per_node`` of node ``r // gpus_per_node``; the node is under
leaf ``node // nodes_per_leaf``; stages are contiguous blocks of ``ranks / stages`` ranks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import polars as pl

from minutiae.analyses.stragglers.prep import TimingMatrix
from minutiae.analyses.stragglers.types import Basis, Suspect

STAGE_FACTORS = (1.0, 1.09, 0.94, 1.05, 0.97, 1.12, 1.02, 0.91)
SECTION_SPLIT = (("forward", 0.33), ("backward", 0.6), ("optimizer", 0.07))


class FaultKind(Enum):
    GPU = "gpu"
    NODE = "node"
    LEAF_COMM = "leaf_comm"


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected slowdown. ``target`` is a rank (GPU), a node index (NODE) or a leaf index."""

    kind: FaultKind
    target: int
    slowdown: float
    start_step: int
    end_step: int | None = None


@dataclass(frozen=True, slots=True)
class SynthSpec:
    ranks: int = 256
    steps: int = 400
    gpus_per_node: int = 8
    nodes_per_leaf: int = 4
    stages: int = 4
    base_step: float = 1.0
    noise: float = 0.018
    seqlen: float = 0.008
    comm_fraction: float = 0.25
    comm_noise: float = 0.03
    gc_rate: float = 1e-4
    loader_rate: float = 5e-5
    diurnal: float = 0.03
    checkpoint_every: int = 250
    start_time: float = 1_767_225_600.0
    seed: int = 0
    faults: tuple[Fault, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.ranks % self.gpus_per_node or self.ranks % self.stages:
            raise ValueError("ranks must be a multiple of gpus_per_node and of stages")


@dataclass(frozen=True, slots=True)
class Block:
    """Steps ``first .. first+len-1``: (steps, ranks) float32 arrays in seconds."""

    first: int
    compute: np.ndarray
    comm: np.ndarray | None

    @property
    def total(self) -> np.ndarray:
        return self.compute if self.comm is None else self.compute + self.comm


class SynthJob:
    def __init__(self, spec: SynthSpec) -> None:
        self.spec = spec
        r = np.arange(spec.ranks)
        self.node_index = r // spec.gpus_per_node
        self.gpu = (r % spec.gpus_per_node).astype(np.int16)
        self.leaf_index = self.node_index // spec.nodes_per_leaf
        per_stage = spec.ranks // spec.stages
        self.stage = (r // per_stage).astype(np.int16)
        # one data-parallel replica = the same node slot in every stage (shares sequence lengths)
        self.replica = (r % per_stage) // spec.gpus_per_node
        factors = np.array(STAGE_FACTORS * (spec.stages // len(STAGE_FACTORS) + 1))
        self.stage_factor = factors[self.stage].astype(np.float32)
        width = max(3, len(str(int(self.node_index.max()))))
        self.node_names = [f"gpu{i:0{width}d}" for i in range(int(self.node_index.max()) + 1)]

    # -- truth ---------------------------------------------------------------------------------
    def fault_ranks(self, fault: Fault) -> np.ndarray:
        if fault.kind is FaultKind.GPU:
            return np.array([fault.target])
        if fault.kind is FaultKind.NODE:
            return np.flatnonzero(self.node_index == fault.target)
        return np.flatnonzero(self.leaf_index == fault.target)

    def component(self, fault: Fault) -> str:
        """The truth label in the same words as ``Suspect.component``."""
        if fault.kind is FaultKind.GPU:
            node = self.node_names[int(self.node_index[fault.target])]
            return f"gpu:{node}/{int(self.gpu[fault.target])}"
        if fault.kind is FaultKind.NODE:
            return f"node:{self.node_names[fault.target]}"
        return f"leaf:leaf{fault.target:03d}"

    # -- data ----------------------------------------------------------------------------------
    def blocks(self, block: int = 100, sections: bool = False) -> Iterator[Block]:
        for first in range(0, self.spec.steps, block):
            yield self.block(first, min(block, self.spec.steps - first), sections)

    def block(self, first: int, n: int, sections: bool = False) -> Block:
        s = self.spec
        rng = np.random.default_rng([s.seed, first])
        steps = np.arange(first, first + n)
        t = steps * s.base_step
        shared = (1.0 + s.diurnal * np.sin(2 * np.pi * t / 86_400.0)).astype(np.float32)
        if s.checkpoint_every:
            shared[(steps % s.checkpoint_every) == s.checkpoint_every - 1] *= 2.5
        jitter = rng.standard_normal((n, s.ranks), dtype=np.float32)
        jitter *= np.float32(s.noise)
        seq = rng.standard_normal((n, int(self.replica.max()) + 1), dtype=np.float32)
        jitter += np.float32(s.seqlen) * seq[:, self.replica]
        compute = np.exp(jitter, out=jitter)
        compute *= self.stage_factor[None, :]
        compute *= (shared * np.float32(s.base_step * (1 - s.comm_fraction)))[:, None]
        flat = compute.reshape(-1)
        for rate, lo, hi in ((s.gc_rate, 0.05, 0.3), (s.loader_rate, 0.2, 1.0)):
            k = rng.poisson(rate * flat.size)
            where = rng.integers(0, flat.size, k)
            flat[where] *= (1.0 + rng.uniform(lo, hi, k)).astype(np.float32)
        comm_slow = np.zeros(s.ranks, dtype=np.float32) if sections else None
        for f in s.faults:
            rows = (steps >= f.start_step) & (steps < (f.end_step if f.end_step is not None else 1 << 62))
            if not rows.any():
                continue
            cols = self.fault_ranks(f)
            if f.kind is FaultKind.LEAF_COMM:
                if comm_slow is not None:
                    comm_slow[cols] = f.slowdown  # applied below to the transfer time
                continue
            sub = compute[np.ix_(rows, cols)]
            compute[np.ix_(rows, cols)] = sub * np.float32(1.0 + f.slowdown)
        comm = None
        if sections:
            assert comm_slow is not None
            xfer = rng.standard_normal((n, s.ranks), dtype=np.float32) * np.float32(s.comm_noise)
            xfer = np.exp(xfer) * np.float32(s.base_step * s.comm_fraction)
            for f in s.faults:
                if f.kind is FaultKind.LEAF_COMM:
                    rows = (steps >= f.start_step) & (
                        steps < (f.end_step if f.end_step is not None else 1 << 62))
                    cols = self.fault_ranks(f)
                    xfer[np.ix_(rows, cols)] *= np.float32(1.0 + f.slowdown)
            per_stage = s.ranks // s.stages
            slowest = compute.reshape(n, s.stages, per_stage).max(axis=2)
            wait = np.repeat(slowest, per_stage, axis=1) - compute
            comm = wait + xfer
        return Block(first, compute, comm)

    # -- the DESIGN.md long table --------------------------------------------------------------
    def table(self, sections: bool = False) -> pl.DataFrame:
        """``step,rank,seconds,node,gpu,stage,time`` (+ ``section`` rows: forward, backward,
        optimizer, allreduce; the total has an empty section). Meant for small jobs."""
        s = self.spec
        frames = []
        nodes = np.array(self.node_names)[self.node_index]
        for b in self.blocks(sections=sections):
            n = b.compute.shape[0]
            step = np.repeat(np.arange(b.first, b.first + n), s.ranks)
            rank = np.tile(np.arange(s.ranks), n)
            base = {
                "step": step, "rank": rank, "node": np.tile(nodes, n),
                "gpu": np.tile(self.gpu, n), "stage": np.tile(self.stage, n),
                "time": s.start_time + step * s.base_step,
            }
            parts = [("", b.total)]
            if sections:
                assert b.comm is not None
                parts += [(name, b.compute * np.float32(frac)) for name, frac in SECTION_SPLIT]
                parts.append(("allreduce", b.comm))
            for name, values in parts:
                frame = pl.DataFrame({**base, "seconds": values.reshape(-1).astype(np.float64)})
                if sections:
                    frame = frame.with_columns(
                        pl.lit(name or None, dtype=pl.String).alias("section"))
                frames.append(frame)
        return pl.concat(frames)


def as_matrix(job: SynthJob, block: Block, leaves: bool = True) -> TimingMatrix:
    """A ``TimingMatrix`` straight from a block (benchmarks skip the long table)."""
    names = tuple(job.node_names[i] for i in job.node_index.tolist())
    leaf = tuple(f"leaf{i:03d}" for i in job.leaf_index.tolist()) if leaves else (None,) * len(names)
    n = block.compute.shape[0]
    steps = np.arange(block.first, block.first + n)
    return TimingMatrix(steps, np.arange(job.spec.ranks), block.total, block.compute, block.comm,
                        names, job.gpu.astype(np.int64), job.stage.astype(np.int64), leaf,
                        Basis.COMPUTE if block.comm is not None else Basis.STEP, ())


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one injected fault fared: ``latency`` = slow steps seen when the alarm fired
    (``detected_step - start_step + 1``); ``located`` = the suspect names the injected component."""

    fault: Fault
    component: str
    detected: bool
    latency: int | None
    located: bool


def score(job: SynthJob, suspects: tuple[Suspect, ...]) -> tuple[list[Outcome], list[Suspect]]:
    """Match suspects to the injected faults; returns the outcomes and the false suspects."""
    rank_fault: dict[int, int] = {}
    for k, f in enumerate(job.spec.faults):
        for r in job.fault_ranks(f).tolist():
            rank_fault.setdefault(r, k)
    matched: dict[int, list[Suspect]] = {}
    false: list[Suspect] = []
    for s in suspects:
        ks = {rank_fault[r] for r in s.ranks
              if r in rank_fault and s.detected_step >= job.spec.faults[rank_fault[r]].start_step}
        if not ks:
            false.append(s)
        for k in ks:
            matched.setdefault(k, []).append(s)
    out = []
    for k, f in enumerate(job.spec.faults):
        got = matched.get(k, [])
        want = job.component(f)
        if not got:
            out.append(Outcome(f, want, False, None, False))
            continue
        first = min(s.detected_step for s in got)
        out.append(Outcome(f, want, True, first - f.start_step + 1,
                           any(s.component == want for s in got)))
    return out, false

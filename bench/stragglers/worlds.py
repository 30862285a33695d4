"""An independent generator of synchronous training-job timings (shares no code with minutiae).

Written from scratch for issue 13 so the straggler detector is measured on structure it was not
built around: it imports numpy and polars only, never ``minutiae`` (checked by a test). Each
``World`` is one job; ``table()`` gives the long table a real logger would write
(``step,rank,seconds,node,gpu[,stage][,section]``) and ``truth`` what was injected.

Model of one rank's compute time at step t (log scale, every term optional per world):

    log x = log base + stage[pp(r)] + job[t] + tp_shared[node(r), t] + lottery[r] + ar[r, t]
            + eps[r, t] + moe[r, t] + checkpoint[t] + fault[r, t]

- parallel layout (Megatron order ``tp-cp-ep-dp-pp``: TP fastest, PP slowest; torchtitan's mesh
  ``pp, dp_replicate, dp_shard, cp, tp`` gives the same PP and TP groups); TP = 8 fills a node;
- ``stage``: first and last pipeline stages heavier (embedding, loss), the others equal;
- ``job``: a per-step factor every rank shares (data, learning-rate schedule, the slowest rank);
- ``tp_shared``: ranks of one TP group (one node) share each micro-batch's noise;
- ``lottery``: a persistent per-GPU offset (silicon lottery), Gaussian, sd <= 1 %;
- ``ar``: AR(1) per-GPU wander (power capping, thermals), coefficient phi, stationary sd;
- ``eps``: per-rank per-step noise with Student-t tails (df 3-5);
- ``moe``: a hot expert: one rank of an EP group is slower for 10-40 steps (``moe_spell``), then
  the heat moves (a logger writing one step in 40 sees it move every logged step);
- restarts: at given steps the job resumes on a new allocation (steps reset or continue, every
  rank on a new node, or a requeue onto the same nodes where half of them swap their ranks and
  the rest keep theirs, as a scheduler's requeue often lands); sparse logging: some ranks log one step in ``every``;
- ``wait_total``: step totals include the collective wait (every rank logs the slowest rank's
  time plus a tiny own part), as per-rank wall-clock loggers do;
- ``ring``: sections ``forward-backward`` and ``allreduce``; a slow link in the ring makes every
  rank's all-reduce slower from its onset.
Faults: ``gpu`` (one rank slower from ``start`` until a restart moves the rank off that GPU),
``node`` (all ranks on that node from ``start``: the node named in the allocation in force at
``start``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl


@dataclass(frozen=True)
class Fault:
    kind: str          # "gpu" (target: rank) or "node" (target: node index in the allocation)
    target: int
    size: float        # 0.05 = 5 % slower
    start: int = 0     # global step index (0-based over the whole job, restarts included)


@dataclass(frozen=True)
class World:
    """One job. Sizes are fractions (0.01 = 1 %)."""

    name: str
    seed: int = 0
    tp: int = 8
    pp: int = 1
    dp: int = 16
    steps: int = 300
    base: float = 1.0
    gpus_per_node: int = 8
    first_stage: float = 0.0        # extra time of PP stage 0
    last_stage: float = 0.0         # extra time of the last PP stage
    stage_column: bool = False
    job_sd: float = 0.02
    tp_shared_sd: float = 0.0
    lottery_sd: float = 0.0
    ar_phi: float = 0.0
    ar_sd: float = 0.0
    eps_sd: float = 0.012
    t_df: float = 0.0               # 0: Gaussian per-rank noise
    moe_ep: int = 0                 # EP group size (0: dense)
    moe_size: float = 0.10
    moe_spell: tuple[int, int] = (10, 40)  # logged steps a hot expert stays (1, 1: moves every step)
    checkpoint_every: int = 0
    checkpoint_cost: float = 2.0
    restarts: tuple[int, ...] = ()  # global step indices where a new allocation starts
    steps_reset: bool = True
    restart_same_nodes: bool = False  # a requeue onto the same nodes: half of them swap ranks
    sparse_every: int = 1           # ranks of odd nodes log one step in this many
    wait_total: bool = False
    ring: bool = False
    ring_onset: int = -1
    ring_size: float = 0.3
    comm_share: float = 0.15
    faults: tuple[Fault, ...] = field(default_factory=tuple)

    @property
    def ranks(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def nodes(self) -> int:
        return self.ranks // self.gpus_per_node


def _t(rng: np.random.Generator, df: float, shape: tuple[int, ...]) -> np.ndarray:
    """Unit-variance Student-t (df > 2) or Gaussian (df 0)."""
    if df <= 0:
        return rng.standard_normal(shape)
    return rng.standard_t(df, shape) / np.sqrt(df / (df - 2.0))


def _ar1(rng: np.random.Generator, phi: float, sd: float, steps: int, n: int) -> np.ndarray:
    out = np.empty((steps, n))
    innov = sd * np.sqrt(1.0 - phi * phi)
    out[0] = rng.normal(0.0, sd, n)
    for t in range(1, steps):
        out[t] = phi * out[t - 1] + rng.normal(0.0, innov, n)
    return out


def _moe(rng: np.random.Generator, w: World, n: int) -> np.ndarray:
    """A hot expert per EP group: one rank of the group slower for ``moe_spell`` logged steps
    (10-40), then another (with a logging interval longer than a spell, every logged step)."""
    out = np.zeros((w.steps, n))
    for g in range(n // w.moe_ep):
        t = 0
        while t < w.steps:
            span = int(rng.integers(w.moe_spell[0], w.moe_spell[1] + 1))
            out[t:t + span, g * w.moe_ep + int(rng.integers(w.moe_ep))] = np.log1p(w.moe_size)
            t += span
    return out


def allocations(w: World) -> list[np.ndarray]:
    """Node name index of every rank, per segment (each restart lands on fresh nodes)."""
    rng = np.random.default_rng(w.seed + 7)
    base = np.arange(w.ranks) // w.gpus_per_node
    out = [base]
    for j, _ in enumerate(w.restarts, start=1):
        if w.restart_same_nodes:  # half the nodes (at least 2) pass their ranks round, the rest stay
            perm = np.arange(w.nodes)
            moved = rng.permutation(w.nodes)[:max(2, w.nodes // 2)]
            perm[moved] = np.roll(moved, 1)
            out.append(perm[out[-1]])
            continue
        perm = rng.permutation(w.nodes)
        out.append(perm[base] + j * w.nodes * 10)  # new names: another part of the cluster
    return out


def compute_log(w: World) -> np.ndarray:
    """(steps, ranks) log compute time, every benign term and every fault."""
    rng = np.random.default_rng(w.seed)
    n, s = w.ranks, w.steps
    rank = np.arange(n)
    stage = rank // (n // w.pp)
    logx = np.full((s, n), np.log(w.base))
    logx[:, stage == 0] += np.log1p(w.first_stage)
    if w.pp > 1:
        logx[:, stage == w.pp - 1] += np.log1p(w.last_stage)
    logx += w.job_sd * _t(rng, 0, (s, 1))
    if w.tp_shared_sd:
        groups = rank // w.tp
        logx += w.tp_shared_sd * rng.standard_normal((s, n // w.tp))[:, groups]
    if w.lottery_sd:
        logx += rng.normal(0.0, w.lottery_sd, n)
    if w.ar_sd:
        logx += _ar1(rng, w.ar_phi, w.ar_sd, s, n)
    logx += w.eps_sd * _t(rng, w.t_df, (s, n))
    if w.moe_ep:
        logx += _moe(rng, w, n)
    if w.checkpoint_every:
        logx[w.checkpoint_every::w.checkpoint_every] += np.log1p(w.checkpoint_cost)
    alloc = allocations(w)
    seg = segment_of(w)
    for f in w.faults:
        if f.kind == "gpu":  # the physical GPU: its rank leaves it at the next restart
            end = next((r for r in w.restarts if r > f.start), w.steps)
            logx[f.start:end, f.target] += np.log1p(f.size)
            continue
        node_name = _node_at(alloc, seg, f)
        for t0, t1, j in _segments(w):
            lo = max(t0, f.start)
            if lo < t1:
                logx[lo:t1, alloc[j] == node_name] += np.log1p(f.size)
    return logx


def _node_at(alloc: list[np.ndarray], seg: np.ndarray, f: Fault) -> int:
    """The node name index of allocation-relative node ``f.target`` at the fault's start."""
    j = int(seg[f.start])
    return int(alloc[j][f.target * (alloc[0].size // (int(alloc[0].max()) + 1))])


def _segments(w: World) -> list[tuple[int, int, int]]:
    cuts = [0, *w.restarts, w.steps]
    return [(cuts[j], cuts[j + 1], j) for j in range(len(cuts) - 1)]


def segment_of(w: World) -> np.ndarray:
    seg = np.zeros(w.steps, dtype=np.int64)
    for r in w.restarts:
        seg[r:] += 1
    return seg


def fault_nodes(w: World) -> dict[Fault, str]:
    """The node name each node fault is on (in the allocation at its start)."""
    alloc, seg = allocations(w), segment_of(w)
    return {f: f"n{_node_at(alloc, seg, f):05d}" for f in w.faults if f.kind == "node"}


def table(w: World) -> pl.DataFrame:
    """The long table a logger would write (one row per rank and step, or per section)."""
    logx = compute_log(w)
    comp = np.exp(logx)
    n, s = w.ranks, w.steps
    alloc, seg = allocations(w), segment_of(w)
    if w.restarts and w.steps_reset:
        starts = np.array([0, *w.restarts])
        step_no = np.arange(s) - starts[seg]
    else:
        step_no = np.arange(s)
    node_idx = np.stack([alloc[j] for j in seg])  # (steps, ranks)
    rng = np.random.default_rng(w.seed + 11)
    comm = None
    if w.wait_total:
        slowest = comp.max(axis=1, keepdims=True)
        seconds = slowest * (1.0 + w.comm_share) * np.exp(rng.normal(0, 0.0005, (s, n)))
    elif w.ring:
        own = w.comm_share * w.base * np.exp(rng.normal(0, 0.01, (s, n)))
        if w.ring_onset >= 0:
            own[w.ring_onset:] *= 1.0 + w.ring_size
        comm = comp.max(axis=1, keepdims=True) - comp + own
        seconds = comp
    else:
        seconds = comp
    keep = np.ones((s, n), dtype=bool)
    if w.sparse_every > 1:
        odd = (np.arange(n) // w.gpus_per_node) % 2 == 1
        keep[:, odd] = (np.arange(s) % w.sparse_every == 0)[:, None]
    cols: dict[str, np.ndarray] = {
        "step": np.broadcast_to(step_no[:, None], (s, n))[keep].astype(np.int64),
        "rank": np.broadcast_to(np.arange(n), (s, n))[keep].astype(np.int64),
        "seconds": seconds[keep],
        "node_i": node_idx[keep],
        "gpu": np.broadcast_to(np.arange(n) % w.gpus_per_node, (s, n))[keep].astype(np.int64),
    }
    if w.stage_column:
        cols["stage"] = np.broadcast_to(np.arange(n) // (n // w.pp), (s, n))[keep].astype(np.int64)
    df = pl.DataFrame(cols)
    df = df.with_columns(pl.format("n{}", pl.col("node_i").cast(pl.String).str.zfill(5))
                         .alias("node")).drop("node_i")
    if comm is not None:
        df = df.with_columns(pl.lit("forward-backward").alias("section"))
        c = df.with_columns(pl.Series("seconds", comm[keep]), pl.lit("allreduce").alias("section"))
        df = pl.concat([df, c])
    return df


#: a realistic benign mixture the faults are injected into (TP-shared, AR, lottery, t tails)
HARD = {"tp_shared_sd": 0.01, "ar_phi": 0.95, "ar_sd": 0.008, "lottery_sd": 0.007,
        "eps_sd": 0.008, "t_df": 4.0}


def benign(seed: int) -> list[World]:
    """Every benign structure of issue 13, one world each (the fault-free goal: 0 suspects)."""
    return [
        World("pp8_first_last", seed, pp=8, dp=4, first_stage=0.06, last_stage=0.10),
        World("pp8_first_last_stagecol", seed, pp=8, dp=4, first_stage=0.06, last_stage=0.10,
              stage_column=True),
        World("pp4_last15_512", seed, pp=4, dp=16, last_stage=0.15),
        World("ar1_phi0.97", seed, dp=16, ar_phi=0.97, ar_sd=0.01),
        World("ar1_phi0.90", seed, dp=16, ar_phi=0.90, ar_sd=0.01),
        World("lottery_1pct_256", seed, dp=32, lottery_sd=0.01),
        World("lottery_0.7pct_1024", seed, dp=128, lottery_sd=0.007, steps=150),
        World("tp_shared", seed, dp=16, tp_shared_sd=0.015, eps_sd=0.005),
        World("jobwide_t3", seed, dp=16, job_sd=0.04, t_df=3.0),
        World("moe_hot_expert", seed, dp=16, moe_ep=8, moe_size=0.12),
        World("checkpoints", seed, dp=16, checkpoint_every=50),
        World("restart_reset", seed, dp=16, restarts=(150,), **HARD),
        World("restart_same_nodes_pp4", seed, pp=4, dp=1, last_stage=0.05, stage_column=True,
              restarts=(150,), steps_reset=False, restart_same_nodes=True, **HARD),
        World("sparse_logging", seed, dp=16, sparse_every=10),
        World("wait_total", seed, dp=16, wait_total=True),
        World("hard_mixture", seed, pp=4, dp=8, first_stage=0.05, last_stage=0.08, **HARD),
    ]


#: the hard mixture without its AR(1) wander (TP-shared, lottery, t tails)
NO_AR = {k: v for k, v in HARD.items() if not k.startswith("ar_")}
#: the wander as issue 13 states it (AR(1), phi 0.9-0.97, 1 %), alone, on the default 1.2 % noise
ISSUE_AR = {"ar_phi": 0.95, "ar_sd": 0.01}


def faulty(seed: int, noise: dict[str, float] | None = None) -> list[World]:
    """Faults under the hard mixture (TP-shared and AR noise; ``noise`` another mixture): the
    detection-delay goals."""
    rng = np.random.default_rng(1000 + seed)
    start = int(rng.integers(60, 120))
    r = int(rng.integers(0, 128))
    node = int(rng.integers(0, 16))
    kw = dict(dp=16, steps=300, **(HARD if noise is None else noise))
    return [
        World("gpu+10%", seed, faults=(Fault("gpu", r, 0.10, start),), **kw),
        World("gpu+5%", seed, faults=(Fault("gpu", r, 0.05, start),), **kw),
        World("gpu+3%", seed, faults=(Fault("gpu", r, 0.03, start),), **kw),
        World("node+5%", seed, faults=(Fault("node", node, 0.05, start),), **kw),
        World("node+8%_from0", seed, faults=(Fault("node", node, 0.08, 0),), **kw),
        World("node+5%_after_restart", seed, restarts=(150,),
              faults=(Fault("node", node, 0.05, 170),), **kw),
        World("gpu+10%_before_restart", seed, restarts=(150,),
              faults=(Fault("gpu", r, 0.10, start),), **kw),
        World("node+5%_after_requeue", seed, restarts=(150,), steps_reset=False,
              restart_same_nodes=True, faults=(Fault("node", node, 0.05, 170),), **kw),
        World("wait_total_gpu+10%", seed, wait_total=True,
              faults=(Fault("gpu", r, 0.10, start),), dp=16),
        World("ring_link+30%", seed, ring=True, ring_onset=start, dp=16),
    ]

"""The benign structure of real jobs in the simulator's timings (issue 13 item 6,
``sim/world/shape.py``): each structure shows in the emitted rows at the size or share the
default profile sets, so switching one off in the profile fails its test (each test also
switches it off and checks that the statistic it measures then vanishes)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from minutiae.scoring.truth import TruthEvent
from minutiae.sim.emit.timings import job_timings
from minutiae.sim.world.job import Job
from minutiae.sim.world.profile import load_profile
from minutiae.sim.world.shape import job_shape, jobs_config

T0 = 1_736_121_600.0
PROF = load_profile()
CFG = jobs_config(PROF)
INTERVAL = float(PROF.sampling["timing_interval_s"])
LLAMA, MOE = "llama-70b-bf16", "moe-8x22b-bf16"


def _job(job_id: str, nodes: tuple[str, ...], hours: float = 14.0, sig: str = LLAMA) -> Job:
    return Job(job_id, T0, T0 + hours * 3600.0, nodes, sig, 6.0 if sig == LLAMA else 4.5,
               "completed")


def _nodes(first: int, n: int = 4) -> tuple[str, ...]:
    return tuple(f"gpu{i:03d}" for i in range(first, first + n))


def _log(job: Job, cfg: dict[str, object] = CFG,
         events: dict[str, list[TruthEvent]] | None = None) -> tuple[pl.DataFrame, np.ndarray]:
    """The job's step totals and their (logged steps, ranks) log seconds."""
    tab, _ = job_timings(job, 8, events or {}, INTERVAL, cfg, np.random.default_rng(1))
    df = pl.from_arrow(tab).filter(pl.col("section").is_null())  # type: ignore[union-attr]
    assert isinstance(df, pl.DataFrame)
    wide = df.pivot(on="rank", index="time", values="seconds").sort("time").drop("time")
    return df, np.log(wide.to_numpy())


#: the profile without the job-share structures (a job picked for wait-included totals logs
#: no per-rank differences at all; those are tested on the jobs the shares pick)
PER_RANK = {**CFG, "shares": {}}


def _with(**over: object) -> dict[str, object]:
    return {**PER_RANK, **over}


def _id_with(what: str, sections: bool = False) -> str:
    """The first job id whose shape has ``what`` (restart, wait_included, ring)."""
    for k in range(1, 5000):
        shape = job_shape(_job(str(k), _nodes(1)), 8, INTERVAL, CFG, CFG["shares"],  # type: ignore[arg-type]
                          sections)
        if (shape.restart is not None) if what == "restart" else getattr(shape, what):
            return str(k)
    raise AssertionError(f"no job with {what}")


def _residual(x: np.ndarray) -> np.ndarray:
    """Log seconds less each step's mean and each rank's mean, GC spikes (+30 %) clipped."""
    r = x - x.mean(axis=1, keepdims=True)
    r = r - r.mean(axis=0, keepdims=True)
    return np.clip(r, -0.15, 0.15)


def test_shares_of_jobs_are_the_profiles_rates() -> None:
    shares = CFG["shares"]
    assert isinstance(shares, dict)
    n = 3000
    shapes = [job_shape(_job(str(k), _nodes(1)), 8, INTERVAL, CFG, shares, False) for k in range(n)]
    got = {"job_restart": sum(s.restart is not None for s in shapes),
           "wait_included_totals": sum(s.wait_included for s in shapes),
           "ring_collective": sum(s.ring for s in shapes)}
    for cls, count in got.items():
        p = float(shares[cls])
        assert p > 0, f"{cls} is off in the profile"
        assert abs(count / n - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-9, (cls, count, p)
    # a job that logs sections never logs wait-included totals (sections are per-rank compute)
    assert not any(job_shape(_job(str(k), _nodes(1)), 8, INTERVAL, CFG, shares, True).wait_included
                   for k in range(300))


def test_lottery_follows_the_physical_gpu_at_the_profiles_size() -> None:
    sd = float(CFG["lottery_sd"])  # type: ignore[arg-type]
    assert sd > 0

    def offsets(cfg: dict[str, object]) -> tuple[np.ndarray, np.ndarray]:
        x, y = (_log(_job(k, nodes), cfg)[1] for k, nodes in (("11", _nodes(1)), ("12", _nodes(3))))
        a, b = ((v - np.median(v, axis=1, keepdims=True)).mean(axis=0) for v in (x, y))
        return a[16:], b[:16]  # gpu003 and gpu004: ranks 16-31 of job 11, 0-15 of job 12

    one = {"pipeline_stages": 1, "stage_imbalance": [0.0]}  # stages would differ between jobs
    a, b = offsets(_with(**one))
    assert np.corrcoef(a, b)[0, 1] > 0.8
    assert 0.5 * sd < float(np.std(a)) < 1.6 * sd
    a, b = offsets(_with(lottery_sd=0.0, **one))
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.6 and float(np.std(a)) < 0.4 * sd


def _lag1(r: np.ndarray) -> float:
    return float((r[1:] * r[:-1]).sum() / (r * r).sum())


def _excess_kurtosis(r: np.ndarray) -> float:
    z = r.ravel() / r.std()
    return float((z**4).mean() - 3.0)


def _within_node(r: np.ndarray) -> float:
    """Mean correlation of step-to-step changes of two GPUs of one node less that of two
    GPUs of different nodes."""
    d = np.diff(r, axis=0)
    same = np.mean([np.corrcoef(d[:, 8 * n], d[:, 8 * n + 1])[0, 1] for n in range(4)])
    other = np.mean([np.corrcoef(d[:, 8 * n], d[:, 8 * ((n + 1) % 4)])[0, 1] for n in range(4)])
    return float(same - other)


@pytest.mark.parametrize(("stat", "off", "on_above", "off_below"), [
    (_lag1, {"wander_sd": 0.0}, 0.02, 0.015),                 # AR(1) per-GPU wander
    (_excess_kurtosis, {"rank_noise_df": 0.0}, 0.8, 0.4),      # Student-t per-rank tails
    (_within_node, {"node_shared_sd": 0.0}, 0.04, 0.02),       # per-node (TP group) noise
])
def test_noise_structures_show_at_the_profiles_sizes(stat, off, on_above, off_below) -> None:  # type: ignore[no-untyped-def]
    job = _job("21", _nodes(1, 8), hours=48.0)
    quiet = {"gc_pause_prob": 0.0}  # GC spikes are outliers of their own
    on = stat(_residual(_log(job, _with(**quiet))[1]))
    without = stat(_residual(_log(job, _with(**quiet, **off))[1]))
    assert on > on_above and abs(without) < off_below, (on, without)


def test_first_and_last_pipeline_stages_are_heavier() -> None:
    imb = np.asarray(CFG["stage_imbalance"], dtype=float)
    stages = int(CFG["pipeline_stages"])  # type: ignore[call-overload]
    assert stages == len(imb) >= 2 and imb[0] > imb[1] and imb[-1] > imb[-2]
    # the per-GPU lottery and wander off: 16 GPUs a stage would move a stage's median ~0.3 %
    df, _ = _log(_job("31", _nodes(1, 8), hours=24.0), _with(lottery_sd=0.0, wander_sd=0.0))
    by = df.group_by("stage").agg(pl.col("seconds").median()).sort("stage")["seconds"].to_numpy()
    got = by / by[1:-1].mean() - 1.0
    assert np.allclose(got, imb - imb[1:-1].mean(), atol=0.006), got


def test_moe_hot_expert_sits_on_one_rank_of_its_group_and_moves() -> None:
    size = float(CFG["moe_hot_size"])  # type: ignore[arg-type]
    assert size > 0 and MOE in CFG["moe_signatures"]  # type: ignore[operator]
    _, x = _log(_job("41", _nodes(1, 2), sig=MOE), PER_RANK)
    r = x - np.median(x, axis=1, keepdims=True)
    ep = int(CFG["moe_ep"])  # type: ignore[call-overload]
    groups = r.reshape(len(r), -1, ep)
    top = groups.max(axis=2)
    assert np.median(top) > 0.7 * np.log1p(size)       # every logged step: one hot rank a group
    hot = groups.argmax(axis=2)
    assert len(np.unique(hot[:, 0])) >= 4                # and it moves between the group's ranks
    _, x = _log(_job("41", _nodes(1, 2), sig=LLAMA), PER_RANK)
    assert np.median((x - np.median(x, axis=1, keepdims=True)).reshape(len(x), -1, ep).max(axis=2)) \
        < 0.5 * np.log1p(size)


def test_restart_moves_ranks_to_other_nodes_and_keeps_both_runs() -> None:
    job = _job(_id_with("restart"), _nodes(1), hours=10.0)
    shape = job_shape(job, 8, INTERVAL, CFG, CFG["shares"], False)  # type: ignore[arg-type]
    assert shape.restart is not None and shape.gap > 0 and shape.order != tuple(range(4))
    df, _ = _log(job)
    t_resume = float(shape.times[shape.restart])
    before = df.filter(pl.col("time") < t_resume)
    after = df.filter(pl.col("time") >= t_resume)
    assert before.height and after.height
    assert len(df["time"].unique()) == len(shape.times) - shape.gap  # the restart's gap
    node = lambda part: dict(part.filter(pl.col("rank") % 8 == 0).select("rank", "node").unique().iter_rows())  # noqa: E731
    assert node(before) != node(after)
    if shape.steps_reset:
        assert int(after["step"].min()) == 0 < int(before["step"].max())


def test_wait_included_totals_are_the_slowest_ranks_time() -> None:
    job = _job(_id_with("wait_included"), _nodes(1))
    _, x = _log(job)
    assert float(np.abs(x - x.mean(axis=1, keepdims=True)).max()) < 0.003
    _, y = _log(job, PER_RANK)
    assert float((y - y.mean(axis=1, keepdims=True)).std()) > 0.01


def test_a_slow_link_in_a_ring_slows_every_rank() -> None:
    job = _job(_id_with("ring"), _nodes(1))
    ev = TruthEvent("f1", "ib_link_flap", "gpu002", "gpu:5", T0 + 4 * 3600, T0 + 14 * 3600,
                    "warning", False, ("timings",), True, {"gpu": 5, "slowdown": 0.15})

    def rank0_slowdown(cfg: dict[str, object]) -> float:
        df, x = _log(job, cfg, {"gpu002": [ev]})
        late = df.select("time").unique().sort("time")["time"].to_numpy() >= T0 + 4 * 3600
        return float(np.exp(x[late, 0].mean() - x[~late, 0].mean()) - 1.0)

    assert rank0_slowdown(CFG) > 0.1
    assert abs(rank0_slowdown(PER_RANK)) < 0.03

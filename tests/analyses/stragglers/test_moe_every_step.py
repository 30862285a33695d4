"""Issue 13: a hot expert that moves every logged step, as the simulator's MoE jobs log it (one
logged step every 40 training steps, a spell of 10-40 steps), written by the independent
generator (bench/stragglers/worlds.py, ``moe_spell=(1, 1)``) with the simulator's sizes: each
rank of an expert-parallel group is +12 % on an eighth of its steps, so +1.5 % on its mean
and next to nothing on its median. On main before this test, seeds 1 and 3 each had a GPU
suspect (+4.0 %, +4.1 %): the mean since onset of a GPU with a 2.5-3.5 % lottery plus the
hot turns, and on seed 3 a one-step Student-t spike counted as the size of a transient fault."""

from __future__ import annotations

import pytest
from bench_worlds import worlds

from minutiae.analyses.stragglers.analysis import Options
from minutiae.analyses.stragglers.runs import analyse_runs

#: the simulator's default profile (sim/world/profiles/default.toml [jobs]): lottery 1.2 %,
#: wander AR(1) 0.7 / 0.8 %, per-node shared noise 1 %, Student-t (4) per-rank noise 3 %
SIM = {"moe_ep": 8, "moe_size": 0.12, "moe_spell": (1, 1), "lottery_sd": 0.012,
       "eps_sd": 0.03, "t_df": 4.0, "tp_shared_sd": 0.01, "ar_phi": 0.7, "ar_sd": 0.008,
       "steps": 300, "dp": 16}


@pytest.mark.parametrize("seed", (1, 3))
def test_a_hot_expert_moving_every_logged_step_is_no_gpu_suspect(seed: int) -> None:
    w = worlds.World("moe_every_step", seed, **SIM)  # type: ignore[arg-type]
    r = analyse_runs(worlds.table(w), w.name, None, Options())
    assert r.suspects == ()


def test_a_real_10pct_gpu_in_such_a_job_is_still_found() -> None:
    # the median level caps only what comes on some steps: a GPU slower on every step keeps it
    w = worlds.World("moe_every_step_gpu+10%", 0, faults=(worlds.Fault("gpu", 37, 0.10, 100),),
                     **SIM)  # type: ignore[arg-type]
    r = analyse_runs(worlds.table(w), w.name, None, Options())
    hit = [s for s in r.suspects if 37 in s.ranks]
    assert hit and [s.component for s in r.suspects] == [hit[0].component]
    assert 0.07 < hit[0].slowdown < 0.13


@pytest.mark.parametrize("seed", (2, 7, 8))
def test_a_3pct_gpu_is_judged_against_what_it_had_before_its_onset(seed: int) -> None:
    # the warm-up's 20-step median knows a GPU's own offset to ~0.8 % at this noise; the mean
    # over every step before the onset (~60-100 here) to ~0.3 %. On main these three +3 %
    # faults (no AR wander) were missed: 7 of 10 seeds found, now 10 of 10 within 50 steps
    w = next(x for x in worlds.faulty(seed, worlds.NO_AR) if x.name == "gpu+3%")
    r = analyse_runs(worlds.table(w), w.name, None, Options())
    hit = [s for s in r.suspects if w.faults[0].target in s.ranks]
    assert hit and len(r.suspects) == 1
    assert hit[0].detected_step - w.faults[0].start + 1 <= 50

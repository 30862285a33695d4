"""Run segments of a job that resumed on partly the same nodes (issue 13, item 4).

A requeue often lands on some of the nodes the job had: the ranks there keep their node, the
others move. The restart is still the whole job's, so every rank's rows from its first step
on are the new segment (before: the ranks that stayed went on in the first segment, alone;
on the simulator's week two 4-node MoE jobs were reported "+3.3-3.6 % slower" on a node that
kept its ranks, compared across two pipeline stages after the restart)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from bench_worlds import worlds

from minutiae.analyses.stragglers.analysis import Options
from minutiae.analyses.stragglers.runs import analyse_runs, segment_ids


def _table(nodes_at: dict[int, list[str]], steps: dict[int, list[int]]) -> pl.DataFrame:
    """Rows in step order: rank r logs ``steps[r]`` on ``nodes_at[r][i]`` for its i-th step."""
    rows = [(s, r, 1.0, nodes_at[r][i]) for r in steps for i, s in enumerate(steps[r])]
    rows.sort(key=lambda x: (x[0], x[1]))
    return pl.DataFrame(rows, schema=["step", "rank", "seconds", "node"], orient="row")


def _seg_by_rank(df: pl.DataFrame) -> dict[int, list[int]]:
    ids = segment_ids(df)
    assert ids is not None
    seg = ids[0]
    out: dict[int, list[int]] = {}
    for r, s in zip(df["rank"].to_list(), seg.tolist(), strict=True):
        out.setdefault(r, []).append(int(s))
    return out


def test_ranks_that_kept_their_node_restart_with_the_job() -> None:
    # ranks 0, 1 swap nodes a and b at step 40; ranks 2, 3 stay on c and d
    steps = {r: list(range(0, 30)) + list(range(40, 60)) for r in range(4)}
    nodes = {0: ["a"] * 30 + ["b"] * 20, 1: ["b"] * 30 + ["a"] * 20,
             2: ["c"] * 50, 3: ["d"] * 50}
    df = _table(nodes, steps)
    by_rank = _seg_by_rank(df)
    for r in range(4):
        assert by_rank[r] == [0] * 30 + [1] * 20
    ids = segment_ids(df)
    assert ids is not None
    opened = ids[1]
    first_after = (df["step"] == 40).to_numpy()
    assert sorted(df["rank"].to_numpy()[first_after & (opened == 2)].tolist()) == [0, 1]


def test_a_rank_that_resumed_a_step_later_is_the_same_restart() -> None:
    # rank 1 logs its first row after the restart at 41 and logged nothing in [40, 41)
    steps = {0: list(range(30)) + list(range(40, 60)), 1: list(range(30)) + list(range(41, 60)),
             2: list(range(30)) + list(range(40, 60))}
    nodes = {0: ["a"] * 30 + ["b"] * 20, 1: ["b"] * 30 + ["a"] * 19, 2: ["c"] * 50}
    by_rank = _seg_by_rank(_table(nodes, steps))
    assert by_rank[0] == by_rank[2] == [0] * 30 + [1] * 20
    assert by_rank[1] == [0] * 30 + [1] * 19


def test_a_later_move_of_other_ranks_is_another_restart() -> None:
    # rank 0 moves at step 40; rank 2 kept logging on c through 40-69 and moves at 70
    steps = {r: list(range(100)) for r in range(3)}
    nodes = {0: ["a"] * 40 + ["x"] * 60, 1: ["b"] * 100, 2: ["c"] * 70 + ["y"] * 30}
    by_rank = _seg_by_rank(_table(nodes, steps))
    for r in range(3):
        assert by_rank[r] == [0] * 40 + [1] * 30 + [2] * 30


def test_step_resets_still_count_each_ranks_runs() -> None:
    # steps start again at 0: segment k is each rank's k-th run (the reset is every rank's)
    steps = {r: list(range(50)) + list(range(30)) for r in range(3)}
    nodes = {0: ["a"] * 80, 1: ["b"] * 50 + ["z"] * 30, 2: ["c"] * 80}
    rows = [(i, s, r, 1.0, nodes[r][i]) for r in steps for i, s in enumerate(steps[r])]
    rows.sort(key=lambda x: (x[0], x[2]))  # file order: the first run, then the second
    df = pl.DataFrame([x[1:] for x in rows], schema=["step", "rank", "seconds", "node"],
                      orient="row")
    by_rank = _seg_by_rank(df)
    for r in range(3):
        assert by_rank[r] == [0] * 50 + [1] * 30


@pytest.mark.parametrize("seed", (0, 1))
def test_a_requeue_onto_the_same_nodes_is_one_job_wide_restart(seed: int) -> None:
    # the independent generator: 4 nodes, one pipeline stage each, steps continuing; half the
    # nodes swap their ranks at step 150 and the others keep theirs
    w = next(x for x in worlds.benign(seed) if x.name == "restart_same_nodes_pp4")
    alloc = worlds.allocations(w)
    assert 0 < int(np.sum(alloc[0] != alloc[1])) < w.ranks  # some ranks moved, some stayed
    r = analyse_runs(worlds.table(w), w.name, None, Options())
    assert [(s["first_step"], s["last_step"], s["rows"]) for s in r.segments] == [
        (0, 149, 150 * w.ranks), (150, w.steps - 1, (w.steps - 150) * w.ranks)]
    assert r.suspects == ()
    assert not any("never reported" in x for x in r.warnings)


@pytest.mark.parametrize("seed", (0, 1))
def test_a_node_slow_after_a_requeue_is_found_in_the_new_run(seed: int) -> None:
    w = next(x for x in worlds.faulty(seed) if x.name == "node+5%_after_requeue")
    r = analyse_runs(worlds.table(w), w.name, None, Options())
    node = worlds.fault_nodes(w)[w.faults[0]]
    assert [(s.component, s.segment) for s in r.suspects] == [(f"node:{node}", 1)]
    assert r.suspects[0].detected_step - w.faults[0].start + 1 <= 20

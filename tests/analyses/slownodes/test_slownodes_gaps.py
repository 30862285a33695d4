"""``Gaps`` finds the same UNKNOWN windows whatever the chunking and the row order within a
chunk (duplicates included): fed whole, or in time-ordered chunks of shuffled rows."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from minutiae.analyses.slownodes.gaps import Gaps

STEP = 300.0


def _table(seed: int) -> tuple[pl.DataFrame, int, int]:
    rng = np.random.default_rng(seed)
    nodes, gpus, steps = int(rng.integers(1, 6)), int(rng.integers(1, 5)), int(rng.integers(5, 200))
    n, g, s = np.meshgrid(np.arange(nodes), np.arange(gpus), np.arange(steps), indexing="ij")
    n, g, s = n.ravel(), g.ravel(), s.ravel()
    keep = rng.random(n.size) > 0.02                      # lost samples: no gap (one step)
    for node in range(nodes):                              # silent spells: a node's or some GPUs'
        a = int(rng.integers(0, steps))
        b = a + int(rng.integers(0, 30))
        keep &= ~((n == node) & (s >= a) & (s < b) & ((g == 0) | (rng.random(n.size) < 0.5)))
    t = s * STEP + rng.integers(0, 20, n.size)            # scrape jitter
    df = pl.DataFrame({"nid": n[keep].astype(np.uint32), "gpu": g[keep], "time": t[keep].astype(float)})
    return pl.concat([df, df.head(5)]), nodes, steps     # duplicated rows


@pytest.mark.parametrize("seed", range(12))
def test_unknown_windows_do_not_depend_on_chunks_or_row_order(seed: int) -> None:
    df, nodes, steps = _table(seed)
    names = [f"n{i}" for i in range(nodes)]
    whole = Gaps(STEP, 900.0)
    whole.feed(df)
    want = whole.result(names, [*names, "never"])
    rng = np.random.default_rng(seed)
    cuts = [0.0, *sorted(rng.choice(np.arange(1, steps), size=min(steps - 1, 5), replace=False) * STEP), 1e18]
    chunked = Gaps(STEP, 900.0)
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=False):
        chunked.feed(df.filter((pl.col("time") >= lo) & (pl.col("time") < hi)).sample(fraction=1.0, shuffle=True,
                                                                                      seed=seed))
    assert chunked.result(names, [*names, "never"]) == want
    assert want[-1].node == "never" and want[-1].reason == "absent"
    assert len(want) > 1 or nodes == 1

"""slownodes' integer peer keys group exactly the samples that the ``sku|job:<id>`` /
``sku|rack:<rack>`` text keys group (the as-of join of each sample to the job on its node)."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from minutiae.analyses.slownodes.keys import Keys as _Keys

NODES = [f"gpu{i:03d}" for i in range(1, 7)]


def _text_peer(tel: pl.DataFrame, fleet: pl.DataFrame, jobs: pl.DataFrame) -> list[str]:
    """The reference: the string keys, by polars' own as-of join."""
    df = tel.join(fleet, on="node", how="left").with_columns(
        pl.col("sku").fill_null("?"), pl.col("rack").fill_null("?"))
    per_node = (jobs.with_columns(pl.col("nodes").str.split(" ").alias("node")).explode("node")
                .select("node", "job_id", pl.col("start").cast(pl.Float64), pl.col("end").cast(pl.Float64))
                .sort("start"))
    df = (df.with_row_index("i").sort("time")
          .join_asof(per_node, left_on="time", right_on="start", by="node", strategy="backward",
                     check_sortedness=False)
          .with_columns(pl.when(pl.col("time") < pl.col("end")).then(pl.col("job_id")).alias("job_id"))
          .sort("i"))
    return [f"{s}|job:{j}" if j is not None else f"{s}|rack:{r}"
            for s, j, r in zip(df["sku"].to_list(), df["job_id"].to_list(), df["rack"].to_list(), strict=True)]


def _same_partition(a: list[object], b: list[object]) -> bool:
    pairs = set(zip(a, b, strict=True))
    return len(pairs) == len(set(a)) == len(set(b))


jobs_st = st.lists(st.tuples(st.sets(st.sampled_from(NODES), min_size=1, max_size=3),
                             st.integers(-5, 40), st.integers(1, 30)), max_size=6)


@settings(max_examples=60, deadline=None)
@given(jobs_st, st.lists(st.tuples(st.sampled_from(NODES), st.integers(0, 40)), min_size=1, max_size=80),
       st.lists(st.sampled_from(["H100", "A100"]), min_size=len(NODES) - 2, max_size=len(NODES) - 2))
def test_integer_peers_partition_samples_as_the_text_keys_do(jobs: list[tuple[set[str], int, int]],
                                                             samples: list[tuple[str, int]],
                                                             skus: list[str]) -> None:
    # jobs may overlap in time on different nodes, start before the first sample, share a start
    # with a sample (at it: covered) or end at one (at the end: not covered); two nodes have no
    # fleet row (SKU and rack "?")
    rows = []
    for k, (nodes, start, dur) in enumerate(jobs):
        rows.append({"job_id": str(100 + k), "nodes": " ".join(sorted(nodes)),
                     "start": str(start * 300.0), "end": str((start + dur) * 300.0)})
    jobs_df = pl.DataFrame(rows, schema={"job_id": pl.String, "nodes": pl.String, "start": pl.String,
                                         "end": pl.String})
    # one job per node at a time, as a scheduler runs them (the as-of join's tie between two
    # jobs starting at once on one node is not defined either way)
    per_node = {n: sorted((s, s + d) for ns, s, d in jobs if n in ns) for n in NODES}
    assume(not any(a[1] > b[0] or a[0] == b[0] for v in per_node.values() for a, b in zip(v, v[1:], strict=False)))
    fleet = pl.DataFrame({"node": NODES[:len(skus)], "sku": skus,
                          "rack": [f"r{i // 2}" for i in range(len(skus))]})
    tel = pl.DataFrame({"node": [n for n, _ in samples], "time": [t * 300.0 for _, t in samples],
                        "gpu": [0] * len(samples), "sm_clock_mhz": [1980] * len(samples)})
    keys = _Keys(tel, fleet, jobs_df if len(jobs_df) else None)
    nid = tel.select(keys.nid()).get_column("nid").to_numpy()
    peer, sku, *_ = keys.peer(nid, tel.get_column("time").to_numpy())
    ref = _text_peer(tel, fleet, jobs_df) if len(jobs_df) else [
        f"{s or '?'}|rack:{r or '?'}" for s, r in zip(*[tel.join(fleet, on="node", how="left")[c].to_list()
                                                       for c in ("sku", "rack")], strict=True)]
    assert _same_partition(peer.tolist(), ref)
    assert _same_partition(sku.tolist(), [r.split("|")[0] for r in ref])


def test_a_sample_at_a_job_start_is_in_it_and_at_its_end_is_not() -> None:
    tel = pl.DataFrame({"node": ["gpu001"] * 3, "time": [0.0, 300.0, 600.0], "gpu": [0] * 3,
                        "sm_clock_mhz": [1980] * 3})
    fleet = pl.DataFrame({"node": ["gpu001"], "sku": ["H100"], "rack": ["r0"]})
    jobs = pl.DataFrame({"job_id": ["7"], "nodes": ["gpu001"], "start": ["300"], "end": ["600"]})
    keys = _Keys(tel, fleet, jobs)
    peer, *_ = keys.peer(np.zeros(3, dtype=np.uint32), np.array([0.0, 300.0, 600.0]))
    assert peer[0] == peer[2] != peer[1]

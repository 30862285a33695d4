"""Integer peer keys for slownodes (pure): node index, SKU and rack codes, and the job covering
each sample, found by one binary search instead of an as-of join on text keys."""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["SMALL_JOB", "Keys"]

#: jobs on fewer nodes than this are compared with the fleet, not with their own GPUs
SMALL_JOB = 3


class Keys:
    """Integer keys computed once for the whole table: ``nid`` (node index), per node its SKU and
    rack codes, and every job's nodes with a job code. A peer group is ``sku|job:<id>`` when a
    job covers the sample, else ``sku|rack:<rack>`` (``slownodes`` step 2); its integer code
    (``peer``) groups exactly the same samples as that text, at a fraction of the cost."""

    def __init__(self, tel: pl.DataFrame, fleet: pl.DataFrame | None, jobs: pl.DataFrame | None) -> None:
        names = tel.get_column("node").cast(pl.String).unique().sort()
        self.names = names.to_list()
        self.enum = pl.Enum(self.names)
        nodes = pl.DataFrame({"node": names, "nid": pl.Series(range(len(names)), dtype=pl.UInt32)})
        if fleet is not None and fleet.height:
            cols = [c for c in ("node", "sku", "rack") if c in fleet.columns]
            nodes = nodes.join(fleet.select(cols).with_columns(pl.col("node").cast(pl.String))
                               .unique("node", keep="first"), on="node", how="left")
        for c in ("sku", "rack"):
            if c not in nodes.columns:
                nodes = nodes.with_columns(pl.lit(None, dtype=pl.String).alias(c))
        nodes = nodes.with_columns(
            *[pl.col(c).cast(pl.String).fill_null("?").rank("dense").cast(pl.Int64).alias(f"{c}_c")
              for c in ("sku", "rack")])
        self.sku_of = nodes.get_column("sku_c").to_numpy()
        self.rack_of = nodes.get_column("rack_c").to_numpy()
        # every job's nodes as (node index, start in ns from the earliest time), sorted: the job
        # covering a sample is found by one binary search on (node index, time) keys
        self.job_key = np.zeros(0, dtype=np.int64)
        self.job_code = np.zeros(0, dtype=np.int64)
        self.job_end = np.zeros(0, dtype=np.float64)
        self.job_small = np.zeros(0, dtype=bool)
        self.job_type = np.zeros(0, dtype=np.int64)
        self.t0, self.span_ns, self.unit = 0.0, 1, 1e9
        if jobs is not None and jobs.height:
            jt = (pl.col("job_type").cast(pl.String) if "job_type" in jobs.columns
                  else pl.lit(None, dtype=pl.String))
            per_node = (jobs.with_columns(pl.col("nodes").str.split(" ").alias("node"),
                                          pl.col("nodes").str.split(" ").list.len().alias("size"),
                                          jt.fill_null("?").alias("jtype"))
                        .explode("node")
                        .select(pl.col("node").cast(pl.String), pl.col("job_id").cast(pl.String),
                                pl.col("start").cast(pl.Float64), pl.col("end").cast(pl.Float64),
                                "size", "jtype"))
            per_node = (per_node.join(nodes.select("node", "nid"), on="node", how="inner")
                        .filter(pl.col("start").is_not_null() & pl.col("start").is_not_nan())
                        .with_columns(pl.col("job_id").rank("dense").cast(pl.Int64).alias("job_c"),
                                      pl.col("jtype").rank("dense").cast(pl.Int64).alias("jt_c")))
            if per_node.height:
                t = tel.get_column("time").cast(pl.Float64)
                starts = per_node.get_column("start")
                lo = min(float(t.min()), float(starts.min()))  # type: ignore[arg-type]
                hi = max(float(t.max()), float(starts.max()))  # type: ignore[arg-type]
                # the finest time unit (ns ... s) whose keys fit in int64 for this many nodes
                self.unit = next((u for u in (1e9, 1e6, 1e3, 1.0)
                                  if len(self.names) * ((hi - lo) * u + 1) < 2.0**62), 1.0)
                self.t0, self.span_ns = lo, int(round((hi - lo) * self.unit)) + 1
                key = self.key(per_node.get_column("nid").to_numpy(), starts.to_numpy())
                order = np.argsort(key, kind="stable")
                self.job_key = key[order]
                self.job_code = per_node.get_column("job_c").to_numpy()[order]
                self.job_end = per_node.get_column("end").fill_null(float("nan")).to_numpy()[order]
                self.job_small = (per_node.get_column("size").to_numpy() < SMALL_JOB)[order]
                self.job_type = per_node.get_column("jt_c").to_numpy()[order]

    def key(self, nid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """(node index, time) as one sortable int64: the node, then time units from ``t0``."""
        return nid.astype(np.int64) * self.span_ns + np.round((t - self.t0) * self.unit).astype(np.int64)

    def peer(self, nid: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(peer code, SKU code, job-type code, small-job flag) per sample: the job on that node
        whose start is the latest at or before ``t`` (as an as-of join would find it) when ``t``
        is before its end, else the rack; SKU and rack from the node's fleet row ("?" when
        missing). A job of fewer than ``SMALL_JOB`` nodes is flagged: its GPUs are compared
        with the same SKU (and job type) across the fleet, not with themselves."""
        sku = self.sku_of[nid]
        group = (1 << 32) + self.rack_of[nid]
        jtype = np.zeros(nid.size, dtype=np.int64)
        small = np.zeros(nid.size, dtype=bool)
        if self.job_key.size:
            j = np.searchsorted(self.job_key, self.key(nid, t), side="right") - 1
            jc = np.maximum(j, 0)
            on = (j >= 0) & (self.job_key[jc] // self.span_ns == nid) & (t < self.job_end[jc])
            group = np.where(on, self.job_code[jc], group)
            jtype = np.where(on, self.job_type[jc], 0)
            small = on & self.job_small[jc]
        return sku * (1 << 33) + group, sku, jtype, small

    def nid(self) -> pl.Expr:
        return pl.col("node").cast(pl.String).cast(self.enum).to_physical().cast(pl.UInt32).alias("nid")

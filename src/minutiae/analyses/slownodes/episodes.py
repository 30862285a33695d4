"""Episodes: runs of consecutive bad samples per GPU that last ``min_duration`` (every run is an
episode: a throttle that outlives a job change is a second episode, not a late one), PCIe
replay episodes, and the merge of a node's overlapping GPU episodes into one node finding.
Pure (polars frames in, findings out)."""

from __future__ import annotations

import numpy as np
import polars as pl

from minutiae.analyses.slownodes.core import REASONS, SlowFinding, SlowOptions, with_evidence

#: each metric's deviation column (``deficits``)
DEVIATION = {"sm_clock": "d_sm_clock_mhz", "ib_xmit": "d_ib_xmit_mbps", "power": "d_power_w",
             "perf_per_watt": "d_ppw", "thermal": "d_thermal", "pcie_replay": "d_sm_clock_mhz"}


def counter_rates(df: pl.DataFrame, interval: float) -> pl.DataFrame:
    """Per-sample increments of cumulative counters (a reset at boot counts as 0), per hour."""
    out = []
    for c in ("pcie_replay", "nvlink_errors"):
        if c in df.columns:
            inc = pl.col(c).cast(pl.Float64).diff().over(["node", "gpu"], order_by="time")
            out.append((pl.when(inc > 0).then(inc).otherwise(0.0) * 3600.0 / interval)
                       .alias(f"{c}_per_h"))
    return df.with_columns(out) if out else df


def episodes(df: pl.DataFrame, slow: pl.Expr, metric: str, interval: float,
              opts: SlowOptions, noise: float) -> list[SlowFinding]:
    # only GPUs with at least one slow sample can have an episode: work on those alone
    cand = df.filter(slow.fill_null(False)).select("node", "gpu").unique()
    if cand.height == 0:
        return []
    df = counter_rates(df.join(cand, on=["node", "gpu"], how="semi"), interval)
    dcol = DEVIATION.get(metric, "d_sm_clock_mhz")
    if metric == "power" and "d_ppu" in df.columns:
        dcol = "d_ppu"
    if metric == "sm_clock" and "d_clock" in df.columns:
        dcol = "d_clock"
    flagged = (df.select("node", "gpu", "time", slow.fill_null(False).alias("slow"), "peers",
                         *dict.fromkeys(["d_sm_clock_mhz", dcol, *[
                             c for c in ("d_temp_c", "d_power_w", "d_ib_xmit_mbps",
                                         "pcie_replay_per_h") if c in df.columns]]),
                         "clock_event_reasons")
               .sort("node", "gpu", "time"))
    gap = (pl.col("time").diff().over(["node", "gpu"]) > 1.5 * interval).fill_null(True)
    flagged = flagged.with_columns(
        ((~pl.col("slow")) | gap | (pl.col("slow") != pl.col("slow").shift(1).over(["node", "gpu"])))
        .cum_sum().over(["node", "gpu"]).alias("run"))
    runs = (flagged.filter(pl.col("slow")).group_by("node", "gpu", "run")
            .agg(pl.col("time").min().alias("start"), pl.col("time").max().alias("end"),
                 pl.len().alias("samples"), pl.col(dcol).median().alias("dev"),
                 pl.col("peers").median().alias("peers"),
                 *[pl.col(c).median().alias(c) for c in ("d_temp_c", "d_power_w")
                   if c in flagged.columns],
                 *[pl.col(c).mean().alias(c) for c in ("pcie_replay_per_h",) if c in flagged.columns],
                 *[((pl.col("clock_event_reasons") & bit) > 0).mean().alias(f"r{bit}")
                   for bit in REASONS])
            # in whole samples: time stamps jitter by seconds around the sample grid
            .with_columns((((pl.col("end") - pl.col("start")) / interval).round() * interval
                           + interval).alias("dur"))
            .filter(pl.col("dur") >= opts.min_duration)
            .sort(["node", "gpu", "start"]))  # every episode, each with its start and end
    out = []
    sign = 1.0 if metric == "thermal" else -1.0  # thermal: C above the model; else a fraction below
    for row in runs.iter_rows(named=True):
        reasons = tuple(name for bit, name in REASONS.items() if row[f"r{bit}"] >= 0.5)
        f = SlowFinding(
            node=row["node"], gpu=int(row["gpu"]), scope="link" if metric == "ib_xmit" else "gpu",
            metric=metric, deficit=sign * float(row["dev"]), z=sign * float(row["dev"]) / noise,
            start=float(row["start"]), end=float(row["end"]) + interval, samples=int(row["samples"]),
            peers=int(row["peers"]), reasons=reasons, temp_delta_c=row.get("d_temp_c"),
            power_deficit=-row["d_power_w"] if row.get("d_power_w") is not None else None,
            pcie_replays_per_hour=row.get("pcie_replay_per_h"), evidence="",
            detected_at=float(row["start"]) + opts.min_duration)
        out.append(with_evidence(f))
    return out


def replay_episodes(df: pl.DataFrame, interval: float, opts: SlowOptions,
                     noise: float) -> list[SlowFinding]:
    """GPUs whose PCIe link replays at least ``pcie_per_hour`` for ``min_duration`` (a healthy
    link replays a handful of times a day); a cheap counter-delta filter picks the candidates."""
    need = opts.pcie_per_hour * opts.min_duration / 3600.0
    counter = pl.col("pcie_replay").cast(pl.Float64)
    cand = (df.group_by("node", "gpu").agg((counter.max() - counter.min()).alias("d"))
            .filter(pl.col("d") >= need).select("node", "gpu"))
    if cand.height == 0:
        return []
    sub = counter_rates(df.join(cand, on=["node", "gpu"], how="semi"), interval)
    return episodes(sub, pl.col("pcie_replay_per_h") >= opts.pcie_per_hour, "pcie_replay",
                     interval, opts, noise)


def _clusters(fs: list[SlowFinding], interval: float) -> list[list[SlowFinding]]:
    """Episodes of one node grouped by overlap in time (a sweep over starts)."""
    out: list[list[SlowFinding]] = []
    end = float("-inf")
    for f in sorted(fs, key=lambda f: (f.start, f.gpu or 0)):
        if out and f.start <= end + interval:
            out[-1].append(f)
            end = max(end, f.end)
        else:
            out.append([f])
            end = f.end
    return out


def _node_finding(node: str, group: list[SlowFinding], of: int) -> SlowFinding:
    base = max(group, key=lambda f: (f.deficit, -(f.gpu or 0)))  # tie: lowest GPU
    merged = SlowFinding(
        node=node, gpu=None, scope="node", metric="sm_clock",
        deficit=float(np.median([f.deficit for f in group])),
        z=float(np.median([f.z for f in group])),
        start=min(f.start for f in group), end=max(f.end for f in group),
        samples=sum(f.samples for f in group), peers=base.peers,
        reasons=tuple(sorted({r for f in group for r in f.reasons})),
        temp_delta_c=base.temp_delta_c, power_deficit=base.power_deficit,
        pcie_replays_per_hour=base.pcie_replays_per_hour, evidence="",
        detected_at=min(f.detected_at for f in group))
    return with_evidence(merged, gpus=len({f.gpu for f in group}), of=of)


def merge_nodes(findings: list[SlowFinding], gpus_per_node: dict[str, int],
                interval: float) -> list[SlowFinding]:
    """Half or more of a node's GPUs slow (SM clock) at overlapping times: one node finding per
    such episode, ``all N GPUs`` only when every GPU of the node is in it."""
    by: dict[str, list[SlowFinding]] = {}
    for f in findings:
        if f.metric == "sm_clock":
            by.setdefault(f.node, []).append(f)
    out = [f for f in findings if f.metric != "sm_clock"]
    for node, fs in by.items():
        n = gpus_per_node.get(node, 1)
        for group in _clusters(fs, interval):
            if len({f.gpu for f in group}) >= max(2, n / 2):
                out.append(_node_finding(node, group, n))
            else:
                out += group
    return out

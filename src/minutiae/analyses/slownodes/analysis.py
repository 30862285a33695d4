"""Slow GPUs and nodes from the telemetry agents already collect, without touching the job.

Input: one row per GPU per sample, ``time,node,gpu,sm_clock_mhz`` and optionally ``power_w,
temp_c,clock_event_reasons,pcie_replay,nvlink_errors,ib_xmit_mbps`` (the simulator's
telemetry.parquet, or DCGM fields read from Prometheus). Method, all columnar (polars):

1. keep busy samples (not ``GpuIdle``, clock above zero): idle GPUs say nothing about speed;
2. peers = the GPUs of the same SKU at the same sample time, in the same job when jobs.csv
   says so, otherwise in the same rack; groups under ``min_peers`` fall back to the same SKU;
3. each sample's deficit = its value / the peer median - 1 (SM clock, IB transmit rate);
4. a sample is slow when its SM-clock deficit is below ``-max(min_deficit, z x noise)``, where
   noise is the robust (1.4826 x MAD) spread of all deficits; IB when below ``-ib_deficit``;
5. persistent = consecutive slow samples (one sampling gap allowed) lasting ``min_duration``;
6. half or more of a node's GPUs persistently slow at overlapping times -> the node.

Each finding carries its evidence: how far below peers, for how long, which clock-event
reasons were active (NVML ``nvmlClocksEventReason*`` bits), temperature and power against peers,
PCIe replay and NVLink error rates. A PCIe link replaying at least ``pcie_per_hour`` for
``min_duration`` is reported too (metric ``pcie_replay``), even at full clock: its transfers are
retried.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

REASONS = {0x2: "applications clocks setting", 0x4: "SW power cap", 0x8: "HW slowdown",
           0x10: "sync boost", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
           0x80: "HW power brake"}
GPU_IDLE = 0x1


@dataclass(frozen=True, slots=True)
class SlowOptions:
    min_deficit: float = 0.03
    z: float = 5.0
    ib_deficit: float = 0.2
    min_duration: float = 1800.0
    min_peers: int = 4
    pcie_per_hour: float = 10.0


@dataclass(frozen=True, slots=True)
class SlowFinding:
    """A GPU (``gpu`` set), node (``scope`` node) or NIC rail (``metric`` ib_xmit) persistently
    worse than its peers. ``deficit``: median fraction below the peer median over the episode
    (0.11 = 11 % below); ``z``: that deficit over the fleet's robust noise; ``start``/``end``:
    epoch seconds of the episode; ``reasons``: clock-event reasons active in most of its
    samples; ``evidence``: one sentence for people."""

    node: str
    gpu: int | None
    scope: str
    metric: str
    deficit: float
    z: float
    start: float
    end: float
    samples: int
    peers: int
    reasons: tuple[str, ...]
    temp_delta_c: float | None
    power_deficit: float | None
    pcie_replays_per_hour: float | None
    evidence: str
    detected_at: float = 0.0

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    @property
    def time(self) -> float:
        """When the episode became persistent (its first sample + the minimum duration): the
        earliest moment a live run of the same analysis would have reported it."""
        return self.detected_at

    @property
    def reason(self) -> str:
        return self.evidence

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "gpu": self.gpu, "scope": self.scope, "metric": self.metric,
                "deficit": round(self.deficit, 4), "z": round(self.z, 1), "start": self.start,
                "end": self.end, "duration_s": round(self.duration_s, 1), "samples": self.samples,
                "peers": self.peers, "reasons": list(self.reasons),
                "temp_delta_c": _r(self.temp_delta_c, 1), "power_deficit": _r(self.power_deficit, 4),
                "pcie_replays_per_hour": _r(self.pcie_replays_per_hour, 1),
                "evidence": self.evidence, "detected_at": self.detected_at}


@dataclass(frozen=True, slots=True)
class SlowReport:
    """``noise``: robust spread of SM-clock deficits among peers (fraction)."""

    findings: tuple[SlowFinding, ...]
    gpus: int
    nodes: int
    samples: int
    interval_s: float
    noise: float
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"suspects": [f.to_json() for f in self.findings], "gpus": self.gpus,
                "nodes": self.nodes, "samples": self.samples, "interval_s": self.interval_s,
                "noise": round(self.noise, 5), "warnings": list(self.warnings)}


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def _minutes(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


def decode_reasons(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit]


def _peer_keys(df: pl.DataFrame, fleet: pl.DataFrame | None, jobs: pl.DataFrame | None) -> pl.DataFrame:
    if fleet is not None and fleet.height:
        cols = [c for c in ("node", "sku", "rack") if c in fleet.columns]
        df = df.join(fleet.select(cols).unique("node"), on="node", how="left")
    for c in ("sku", "rack"):
        if c not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=pl.String).alias(c))
    df = df.with_columns(pl.col("sku").fill_null("?"), pl.col("rack").fill_null("?"))
    if jobs is not None and jobs.height:
        per_node = (jobs.with_columns(pl.col("nodes").str.split(" ").alias("node"))
                    .explode("node").select("node", "job_id", pl.col("start").cast(pl.Float64),
                                            pl.col("end").cast(pl.Float64)).sort("start"))
        df = (df.sort("time").join_asof(per_node, left_on="time", right_on="start", by="node",
                                         strategy="backward", check_sortedness=False)
              .with_columns(pl.when(pl.col("time") < pl.col("end")).then(pl.col("job_id"))
                            .otherwise(None).alias("job_id")).drop("start", "end"))
    else:
        df = df.with_columns(pl.lit(None, dtype=pl.String).alias("job_id"))
    return df.with_columns(
        (pl.col("sku") + "|" + pl.when(pl.col("job_id").is_not_null())
         .then("job:" + pl.col("job_id").cast(pl.String)).otherwise("rack:" + pl.col("rack")))
        .alias("peer"))


def analyse_telemetry(tel: pl.DataFrame, fleet: pl.DataFrame | None = None,
                      jobs: pl.DataFrame | None = None, opts: SlowOptions | None = None,
                      where: str = "telemetry", chunk_rows: int | None = 250_000) -> SlowReport:
    """Slow GPUs, nodes and links in ``tel``, processed about ``chunk_rows`` rows (whole sample
    times) at a time, ``None``: all at once; the result is the same (see ``slownodes_chunks``)."""
    from minutiae.analyses.slownodes.chunked import analyse_chunked

    return analyse_chunked(tel, fleet, jobs, opts, where, chunk_rows)


def _counter_rates(df: pl.DataFrame, interval: float) -> pl.DataFrame:
    """Per-sample increments of cumulative counters (a reset at boot counts as 0), per hour."""
    out = []
    for c in ("pcie_replay", "nvlink_errors"):
        if c in df.columns:
            inc = pl.col(c).cast(pl.Float64).diff().over(["node", "gpu"], order_by="time")
            out.append((pl.when(inc > 0).then(inc).otherwise(0.0) * 3600.0 / interval)
                       .alias(f"{c}_per_h"))
    return df.with_columns(out) if out else df


def _episodes(df: pl.DataFrame, slow: pl.Expr, metric: str, interval: float,
              opts: SlowOptions, noise: float) -> list[SlowFinding]:
    # only GPUs with at least one slow sample can have an episode: work on those alone
    cand = df.filter(slow.fill_null(False)).select("node", "gpu").unique()
    if cand.height == 0:
        return []
    df = _counter_rates(df.join(cand, on=["node", "gpu"], how="semi"), interval)
    flagged = (df.select("node", "gpu", "time", slow.fill_null(False).alias("slow"), "peers",
                         "d_sm_clock_mhz", *[c for c in ("d_temp_c", "d_power_w", "d_ib_xmit_mbps",
                                                          "pcie_replay_per_h") if c in df.columns],
                         "clock_event_reasons")
               .sort("node", "gpu", "time"))
    gap = (pl.col("time").diff().over(["node", "gpu"]) > 1.5 * interval).fill_null(True)
    flagged = flagged.with_columns(
        ((~pl.col("slow")) | gap | (pl.col("slow") != pl.col("slow").shift(1).over(["node", "gpu"])))
        .cum_sum().over(["node", "gpu"]).alias("run"))
    dcol = "d_ib_xmit_mbps" if metric == "ib_xmit" else "d_sm_clock_mhz"
    runs = (flagged.filter(pl.col("slow")).group_by("node", "gpu", "run")
            .agg(pl.col("time").min().alias("start"), pl.col("time").max().alias("end"),
                 pl.len().alias("samples"), pl.col(dcol).median().alias("dev"),
                 pl.col("peers").median().alias("peers"),
                 *[pl.col(c).median().alias(c) for c in ("d_temp_c", "d_power_w")
                   if c in flagged.columns],
                 *[pl.col(c).mean().alias(c) for c in ("pcie_replay_per_h",) if c in flagged.columns],
                 *[((pl.col("clock_event_reasons") & bit) > 0).mean().alias(f"r{bit}")
                   for bit in REASONS])
            .with_columns((pl.col("end") - pl.col("start") + interval).alias("dur"))
            .filter(pl.col("dur") >= opts.min_duration)
            .sort(["dur", "start"], descending=[True, False])  # longest, then earliest: no tie left
            .unique(["node", "gpu"], keep="first", maintain_order=True))
    out = []
    for row in runs.iter_rows(named=True):
        reasons = tuple(name for bit, name in REASONS.items() if row[f"r{bit}"] >= 0.5)
        f = SlowFinding(
            node=row["node"], gpu=int(row["gpu"]), scope="link" if metric == "ib_xmit" else "gpu",
            metric=metric, deficit=-float(row["dev"]), z=-float(row["dev"]) / noise,
            start=float(row["start"]), end=float(row["end"]) + interval, samples=int(row["samples"]),
            peers=int(row["peers"]), reasons=reasons, temp_delta_c=row.get("d_temp_c"),
            power_deficit=-row["d_power_w"] if row.get("d_power_w") is not None else None,
            pcie_replays_per_hour=row.get("pcie_replay_per_h"), evidence="",
            detected_at=float(row["start"]) + opts.min_duration)
        out.append(_with_evidence(f))
    return out


def _replay_episodes(df: pl.DataFrame, interval: float, opts: SlowOptions,
                     noise: float) -> list[SlowFinding]:
    """GPUs whose PCIe link replays at least ``pcie_per_hour`` for ``min_duration`` (a healthy
    link replays a handful of times a day); a cheap counter-delta filter picks the candidates."""
    need = opts.pcie_per_hour * opts.min_duration / 3600.0
    counter = pl.col("pcie_replay").cast(pl.Float64)
    cand = (df.group_by("node", "gpu").agg((counter.max() - counter.min()).alias("d"))
            .filter(pl.col("d") >= need).select("node", "gpu"))
    if cand.height == 0:
        return []
    sub = _counter_rates(df.join(cand, on=["node", "gpu"], how="semi"), interval)
    return _episodes(sub, pl.col("pcie_replay_per_h") >= opts.pcie_per_hour, "pcie_replay",
                     interval, opts, noise)


def _with_evidence(f: SlowFinding, gpus: int | None = None) -> SlowFinding:
    if f.metric == "pcie_replay":
        text = (f"GPU {f.gpu} on node {f.node} logged {f.pcie_replays_per_hour or 0:.0f} PCIe "
                f"replays/h for {_minutes(f.duration_s)} (a retrying link), SM clock "
                f"{-f.deficit:+.0%} vs peers")
        return replace(f, evidence=text)
    what = "IB transmit rate" if f.metric == "ib_xmit" else "SM clock"
    who = (f"all {gpus} GPUs on node {f.node}" if gpus else f"GPU {f.gpu} on node {f.node}")
    text = (f"{who} ran {f.deficit:.0%} below {'their' if gpus else 'its'} peers' {what} for "
            f"{_minutes(f.duration_s)}")
    extra = []
    if f.reasons:
        extra.append(", ".join(f.reasons) + " active")
    elif f.metric == "sm_clock":
        extra.append("no clock-event reason reported")
    if f.temp_delta_c is not None and abs(f.temp_delta_c) >= 5:
        extra.append(f"{f.temp_delta_c:+.0f} C vs peers")
    if f.pcie_replays_per_hour is not None and f.pcie_replays_per_hour >= 1:
        extra.append(f"{f.pcie_replays_per_hour:.0f} PCIe replays/h")
    text += (", " + ", ".join(extra)) if extra else ""
    return replace(f, evidence=text)


def _merge_nodes(findings: list[SlowFinding], gpus_per_node: dict[str, int],
                 interval: float) -> list[SlowFinding]:
    by: dict[str, list[SlowFinding]] = {}
    for f in findings:
        if f.metric == "sm_clock":
            by.setdefault(f.node, []).append(f)
    out = [f for f in findings if f.metric != "sm_clock"]
    for node, fs in by.items():
        n = gpus_per_node.get(node, 1)
        start = float(np.median([f.start for f in fs]))
        overlapping = [f for f in fs if f.start <= start + interval and f.end >= start]
        if len(overlapping) >= max(2, n / 2):
            base = max(overlapping, key=lambda f: (f.deficit, -(f.gpu or 0)))  # tie: lowest GPU
            merged = SlowFinding(
                node=node, gpu=None, scope="node", metric="sm_clock",
                deficit=float(np.median([f.deficit for f in overlapping])),
                z=float(np.median([f.z for f in overlapping])),
                start=min(f.start for f in overlapping), end=max(f.end for f in overlapping),
                samples=sum(f.samples for f in overlapping), peers=base.peers,
                reasons=tuple(sorted({r for f in overlapping for r in f.reasons})),
                temp_delta_c=base.temp_delta_c, power_deficit=base.power_deficit,
                pcie_replays_per_hour=base.pcie_replays_per_hour, evidence="",
                detected_at=min(f.detected_at for f in overlapping))
            out.append(_with_evidence(merged, gpus=len(overlapping)))
            out += [f for f in fs if f not in overlapping]
        else:
            out += fs
    return out


def detect_dataset(root: Path | str, opts: SlowOptions | None = None) -> list[SlowFinding]:
    """Findings on a simulator dataset directory (what ``minutiae eval`` scores)."""
    from minutiae.analyses.slownodes.read import read_dataset

    tel, fleet, jobs = read_dataset(Path(root))
    return list(analyse_telemetry(tel, fleet, jobs, opts, str(root)).findings)

"""The slownodes analysis over a table too large to process at once (a week of a 1,024-node
fleet: 16.5 M rows), with results identical to processing it whole.

Peer medians only ever compare GPUs at the same sample time (``bucket``), so the table is
processed in chunks of whole buckets (``chunk_rows`` rows at a time, about):

1. pass 1, per chunk: busy samples, peer keys, the per-(bucket, peer) and per-(bucket, SKU)
   medians (kept: they are small), every SM-clock deficit (kept as one float array for the
   fleet's robust noise), and per GPU its lowest SM-clock and IB deficit and its PCIe-replay
   counter range (kept: one row per GPU);
2. the noise, hence the slow limit, gives the candidate GPUs: those with any sample below it, an
   IB deficit below ``ib_deficit``, or enough PCIe replays;
3. pass 2, by batches of about ``chunk_rows`` rows of whole nodes: only the candidates' rows
   get deficits again (from the kept medians: only the (bucket, group) rows the batch's samples
   join, ``_restrict``, so a batch's joins grow with the batch, not with the span) and go
   through the episode search, which needs each GPU's whole series (GPUs are independent
   there; nodes are merged at the end).

Peak memory is the input table plus one chunk's working set plus about 10 bytes per sample (its
deficit and chunk number), instead of a dozen float columns for every sample.

Keys are integers (``Keys``): a node index, and a peer code that groups exactly the samples the
``sku|job:<id>`` / ``sku|rack:<rack>`` text groups; each row's chunk number is computed once.
On the 1,024-node week this gives the same report as the string keys and a time filter per
chunk, in 16 s CPU instead of 30-47 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from minutiae.analyses.slownodes import core as sn
from minutiae.analyses.slownodes import deficits as D
from minutiae.analyses.slownodes import episodes as ep
from minutiae.analyses.slownodes.gaps import Gaps
from minutiae.analyses.slownodes.keys import Keys
from minutiae.errors import DataError

#: rows per chunk (2.5 h of 1,024 x 8 GPUs sampled every 5 minutes; a day of 128 nodes)
CHUNK_ROWS = 250_000
#: pass 1 merges the chunks' per-GPU clock histograms every this many chunks
MERGE_EVERY = 8
_KEY = ["nid", "gpu"]


@dataclass(slots=True)
class _Pass1:
    """What pass 1 keeps: per-(bucket, group) medians of the peer, SKU and rack groups, every
    SM-clock deficit (for the noise), the thermal fit sums, per GPU its worst deviations and
    replay counter range, every (node, GPU) seen, and the telemetry gaps."""

    gaps: Gaps
    peer_st: list[pl.DataFrame] = field(default_factory=list)
    sku_st: list[pl.DataFrame] = field(default_factory=list)
    rack_st: list[pl.DataFrame] = field(default_factory=list)
    own_st: list[pl.DataFrame] = field(default_factory=list)
    fits: list[pl.DataFrame] = field(default_factory=list)
    bins: list[pl.DataFrame] = field(default_factory=list)
    devs: list[np.ndarray] = field(default_factory=list)
    per_gpu: list[pl.DataFrame] = field(default_factory=list)
    seen: list[pl.DataFrame] = field(default_factory=list)
    samples: int = 0


def _validate(tel: pl.DataFrame, where: str) -> tuple[pl.DataFrame, list[str]]:
    need = ("time", "node", "gpu", "sm_clock_mhz")
    missing = [c for c in need if c not in tel.columns]
    if missing:
        raise DataError(f"missing column(s) {', '.join(missing)}; need {', '.join(need)}", where)
    warnings: list[str] = []
    null = pl.col("time").is_null() | pl.col("node").is_null() | pl.col("gpu").is_null()
    n_bad = int(tel.select(null.sum()).item())
    if n_bad:
        warnings.append(f"{n_bad} rows without time/node/gpu skipped")
        tel = tel.filter(~null)
    if tel.height == 0:
        raise DataError("no telemetry rows", where)
    return tel, warnings


def chunk_numbers(times: pl.Series, interval: float, chunk_rows: int | None) -> tuple[np.ndarray, int]:
    """Each row's chunk number (chunks of whole buckets, about ``chunk_rows`` rows each, in time
    order; a number may have no rows when the table has a long gap) and the count of numbers.
    The chunk is a function of the row's bucket (its time / ``interval``, rounded as the
    analysis rounds it: half to even), so no table of the distinct times is built (+16 MB at
    2 M rows); it is computed a slice at a time and 2 bytes per row are kept."""
    if chunk_rows is None or times.len() == 0:
        return np.zeros(times.len(), dtype=np.uint16), 1
    lo, hi = float(times.min()), float(times.max())  # type: ignore[arg-type]
    b0 = int(np.round(lo / interval))
    n_b = int(np.round(hi / interval)) - b0 + 1
    per = max(1, int(chunk_rows * n_b / times.len()))
    count = (n_b - 1) // per + 1
    kind = np.uint16 if count < 2**16 else np.int64
    out = np.empty(times.len(), dtype=kind)
    step = 1 << 16  # slices of 0.5 MB: no temporary the size of the column
    for i in range(0, times.len(), step):
        t = times.slice(i, step).to_numpy()
        out[i:i + t.size] = (np.round(t / interval).astype(np.int64) - b0) // per
    return out, count


def _chunk_of(tel: pl.DataFrame, chunk_rows: int | None) -> tuple[float, np.ndarray, int]:
    """(sample interval, each row's chunk number, number of chunks)."""
    interval = sample_interval(tel)
    return (interval, *chunk_numbers(tel.get_column("time").cast(pl.Float64), interval, chunk_rows))


def sample_interval(tel: pl.DataFrame, nodes: int = 4) -> float:
    """The sampling interval: the median step between a GPU's consecutive samples, over the GPUs
    of the first ``nodes`` nodes in the table. Per GPU, not between the table's distinct times:
    scrapes stamp each node at its own second (jitter), and a fleet's distinct times are then
    seconds apart although each GPU is sampled every few minutes. 60 s when no GPU has two.
    Four nodes (32 GPU series on 8-GPU nodes) give the median; the copy of their rows is the
    one part of the analysis that grows with the table (32 nodes of 128 were +173 MB at 2 M
    rows, more than every chunk: tests/analyses/slownodes/test_slownodes_memory.py)."""
    first = tel.get_column("node").head(4096).cast(pl.String).unique(maintain_order=True).head(nodes)
    steps = (tel.lazy().select(pl.col("node").cast(pl.String), pl.col("gpu").cast(pl.Int64),
                               pl.col("time").cast(pl.Float64))
             .filter(pl.col("node").is_in(first.implode())).unique().sort("node", "gpu", "time")
             .select(pl.col("time").diff().over(["node", "gpu"])).collect()
             .to_series().drop_nulls().to_numpy())
    steps = steps[steps > 0]
    return float(np.median(steps)) if steps.size else 60.0


def _per_gpu_aggs(df: pl.DataFrame, opts: sn.SlowOptions) -> list[pl.Expr]:
    aggs = [pl.col("d_sm_clock_mhz").min().alias("sm"), pl.col("alone").any().alias("alone")]
    util_ok = pl.col("util") >= opts.min_util if "util" in df.columns else pl.lit(True)
    for col, name, how in (("d_ib_xmit_mbps", "ib", "min"), ("d_thermal", "th", "max"),
                           ("d_ppu" if "d_ppu" in df.columns else "d_power_w", "pw", "min"),
                           ("d_ppw", "ppw", "min")):
        if col in df.columns:
            e = pl.col(col) if name in ("ib", "th") else pl.when(util_ok).then(pl.col(col))
            aggs.append((e.max() if how == "max" else e.min()).alias(name))
    if "pcie_replay" in df.columns:
        counter = pl.col("pcie_replay").cast(pl.Float64)
        aggs += [counter.max().alias("rmax"), counter.min().alias("rmin")]
    return aggs


def _chunk(st: _Pass1, raw: pl.DataFrame, metrics: list[str], interval: float, keys: Keys,
           opts: sn.SlowOptions) -> None:
    st.gaps.feed(raw.select("nid", "gpu", "time"))
    st.seen.append(raw.select("nid", pl.col("gpu").cast(pl.Int64)).unique())
    df = D.busy(raw, metrics, interval, keys)
    if df.height == 0:
        return
    st.samples += df.height
    peer, sku, rack, own = D.stats(df, metrics)
    df = D.deficits(df, (peer, sku, rack, own), opts, metrics, None)
    if "dt" in df.columns:
        fit = D.thermal_fit(df)
        st.fits.append(fit)
        df = D.add_thermal(df, D.resistance([fit]))  # this chunk's fit: candidates only
    st.bins.append(D.history_bins(df))
    st.peer_st.append(peer)
    st.sku_st.append(sku)
    st.rack_st.append(rack)
    st.own_st.append(own)
    d = df.get_column("d_sm_clock_mhz").to_numpy()
    st.devs.append(d[np.isfinite(d)])
    st.per_gpu.append(df.group_by(_KEY).agg(_per_gpu_aggs(df, opts)))


def _pass1(tel: pl.DataFrame, metrics: list[str], interval: float, keys: Keys, chunk_of: np.ndarray,
           n_chunks: int, opts: sn.SlowOptions) -> _Pass1:
    cols = ["node", "time", "gpu", *[m for m in metrics if m != "ppu"],
            *[c for c in ("clock_event_reasons", "pcie_replay", "util", "power_limit_w")
              if c in tel.columns]]
    slim = tel.select(cols)
    st = _Pass1(Gaps(interval, opts.gap_min_s))
    # a table in time order (the simulator's, Prometheus' by scrape) has each chunk as one run
    # of rows: a zero-copy slice instead of a compare of every row per chunk and a gather
    ordered = bool(np.all(chunk_of[1:] >= chunk_of[:-1]))
    starts = np.searchsorted(chunk_of, np.arange(n_chunks + 1)) if ordered else None
    for k in range(n_chunks):
        if starts is not None:
            part = slim.slice(int(starts[k]), int(starts[k + 1] - starts[k]))
        else:
            part = slim[np.flatnonzero(chunk_of == k)]
        if part.height:
            _chunk(st, part.with_columns(keys.nid()).drop("node"), metrics, interval, keys, opts)
        if len(st.bins) >= MERGE_EVERY:  # per-GPU clock histograms: bounded by GPUs, not chunks
            st.bins = [D.merge_bins(st.bins)]
    return st


def _noise(devs: list[np.ndarray]) -> float:
    """1.4826 x MAD of every SM-clock deficit, in place (8 bytes per sample); at least 1e-4."""
    d = np.concatenate(devs) if devs else np.zeros(0)
    noise = float("nan")
    if d.size:
        d -= np.median(d, overwrite_input=True)
        noise = float(1.4826 * np.median(np.abs(d, out=d), overwrite_input=True))
    return max(noise, 1e-4)


def _candidates(gpus: pl.DataFrame, limit: float, opts: sn.SlowOptions) -> pl.DataFrame:
    """GPUs that may have an episode: any sample past a limit (the thermal one at 60 %: the
    chunk's own fit is not yet the fleet's)."""
    tests = {"sm": (pl.col("sm").min(), pl.col("sm") < -limit),
             "alone": (pl.col("alone").any(), pl.col("alone")),  # judged on its own history
             "ib": (pl.col("ib").min(), pl.col("ib") < -opts.ib_deficit),
             "th": (pl.col("th").max(), pl.col("th") > 0.6 * opts.thermal_c),
             "pw": (pl.col("pw").min(), pl.col("pw") < -opts.power_deficit),
             "ppw": (pl.col("ppw").min(), pl.col("ppw") < -opts.ppw_deficit)}
    aggs, cand = [], pl.lit(False)
    for col, (agg, test) in tests.items():
        if col in gpus.columns:
            aggs.append(agg)
            cand = cand | test.fill_null(False)
    if "rmax" in gpus.columns:
        aggs += [pl.col("rmax").max(), pl.col("rmin").min()]
        cand = cand | (pl.col("rmax") - pl.col("rmin") >= opts.pcie_per_hour * opts.min_duration / 3600.0)
    return gpus.group_by(_KEY).agg(aggs).filter(cand.fill_null(False)).select(_KEY)


_JOINS = (("bucket", "peer"), ("bucket", "sku", "skuu"), ("bucket", "rack"), ("bucket", "own"))


def _restrict(groups: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | None, pl.DataFrame],
              df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | None, pl.DataFrame]:
    """The rows of the span's peer, SKU, rack and own tables that ``df``'s samples join (their
    (bucket, group) pairs): each batch then joins tables the size of its own samples, not of
    the whole span's groups."""
    out = [None if g is None else g.join(df.select(*on).unique(), on=list(on), how="semi")
           for g, on in zip(groups, _JOINS, strict=True)]
    peer, sku, rack, own = out
    assert peer is not None and sku is not None and own is not None
    return peer, sku, rack, own


def _pass2(tel: pl.DataFrame, cands: pl.DataFrame, st: _Pass1, keys: Keys, metrics: list[str],
           interval: float, opts: sn.SlowOptions, noise: float, per_batch: int) -> list[sn.SlowFinding]:
    """Episodes of the candidate GPUs for every signal, by batches of whole nodes."""
    limit = max(opts.min_deficit, opts.z * noise)
    findings: list[sn.SlowFinding] = []
    peer, sku = pl.concat(st.peer_st), pl.concat(st.sku_st)
    rack = pl.concat(st.rack_st) if st.rack_st else None
    groups = (peer, sku, rack, pl.concat(st.own_st))
    resist = D.resistance(st.fits) if st.fits else None
    base = D.history(st.bins)
    cand_nodes = sorted(keys.names[i] for i in cands.get_column("nid").unique().to_list())
    for i in range(0, len(cand_nodes), per_batch):
        rows = (tel.filter(pl.col("node").cast(pl.String).is_in(cand_nodes[i:i + per_batch]))
                .with_columns(pl.col("node").cast(pl.String), pl.col("gpu").cast(pl.Int64), keys.nid())
                .join(cands, on=_KEY, how="semi"))
        df = D.busy(rows, metrics, interval, keys)
        df = D.add_history(D.deficits(df, _restrict(groups, df), opts, metrics, resist), base)
        del rows
        for metric, slow in D.slow_exprs(df, limit, opts).items():
            findings += ep.episodes(df, slow, metric, interval, opts,
                                    1.0 if metric == "thermal" else noise)
        if "pcie_replay" in df.columns:
            findings += ep.replay_episodes(df, interval, opts, noise)
        del df
    return findings


def analyse_chunked(tel: pl.DataFrame, fleet: pl.DataFrame | None = None,
                    jobs: pl.DataFrame | None = None, opts: sn.SlowOptions | None = None,
                    where: str = "telemetry", chunk_rows: int | None = CHUNK_ROWS) -> sn.SlowReport:
    """What ``slownodes.analyse_telemetry`` returns; ``chunk_rows=None``: one chunk."""
    opts = opts or sn.SlowOptions()
    tel, warnings = _validate(tel, where)
    metrics = ["sm_clock_mhz"] + [m for m in ("power_w", "temp_c", "ib_xmit_mbps", "throughput")
                                  if m in tel.columns]
    if "power_w" in tel.columns and "util" in tel.columns:
        metrics.append("ppu")
    interval, chunk_of, n_chunks = _chunk_of(tel, chunk_rows)
    keys = Keys(tel, fleet, jobs)
    st = _pass1(tel, metrics, interval, keys, chunk_of, n_chunks, opts)
    del chunk_of
    fleet_nodes = (fleet.get_column("node").cast(pl.String).to_list()
                   if fleet is not None and "node" in fleet.columns else [])
    unknown = tuple(st.gaps.result(keys.names, fleet_nodes))
    every = pl.concat(st.seen).unique()
    n_gpus, n_nodes = every.height, every.get_column("nid").n_unique()
    if st.samples == 0:
        return sn.SlowReport((), n_gpus, n_nodes, 0, interval, float("nan"),
                             tuple(warnings + ["no busy samples: nothing to compare"]), unknown)
    noise = _noise(st.devs)
    st.devs.clear()
    gpus = pl.concat(st.per_gpu)
    gpus_per_node = {keys.names[nid]: n for nid, n in
                     every.group_by("nid").agg(pl.col("gpu").n_unique()).iter_rows()}
    cands = _candidates(gpus, max(opts.min_deficit, opts.z * noise), opts)
    per_batch = max(1, cands.get_column("nid").n_unique() if chunk_rows is None
                    else chunk_rows * n_nodes // tel.height)
    findings = _pass2(tel, cands, st, keys, metrics, interval, opts, noise, per_batch)
    findings = ep.merge_nodes(findings, gpus_per_node, interval)
    findings.sort(key=lambda f: (-f.deficit * f.duration_s, f.node, f.gpu or -1, f.start))
    return sn.SlowReport(tuple(findings), n_gpus, n_nodes, st.samples, interval, noise,
                         tuple(warnings), unknown)

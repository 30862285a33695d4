"""Per-chunk maths of slownodes (pure): busy samples with their peer codes, peer medians per
sample time, and each sample's deviation from its peers for every signal.

Peer groups, all at the same sample time (``bucket``):

* ``peer``: the GPUs of the same job (``sku|job``), else of the same rack, at the same enforced
  power limit;
* ``sku``: the same SKU, power limit and utilisation decile across the fleet (the job type
  shows in the utilisation): what a GPU of a small job (fewer than ``keys.SMALL_JOB`` nodes) is
  compared with when the fleet has ``min_peers`` such GPUs besides the job's, and the fallback
  for groups under ``min_peers``;
* ``rack``: the same SKU in the same rack (the same inlet air): the thermal model's peers;
* ``own``: the GPUs of the same job (the same workload), else of the same node, at the same
  power limit: the only peers for power and throughput per watt, whatever the job's size. How
  much power a GPU draws at a given utilisation depends on what it runs (a GEMM-heavy job draws
  more than a memory-bound one at the same 100 %), so power is never compared across jobs: a
  small job's GPUs are compared with each other (a whole node drawing less in a 1-node job is
  not told apart from a lighter workload).

Signals: SM clock, IB transmit rate, power (value / peer median - 1; ``power`` counts only at
``min_util`` or more and when the clock is not low: power at a given utilisation and clock),
throughput per watt (when a ``throughput`` column exists), and the thermal residual: degrees
above the rack peers' temperature once the power difference is accounted for by the SKU's
thermal resistance (C/W, fitted over the fleet: ``thermal_fit``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from minutiae.analyses.slownodes.core import GPU_IDLE, SlowOptions
from minutiae.analyses.slownodes.keys import Keys

SW_POWER_CAP = 0x4

__all__ = ["add_history", "add_thermal", "history", "history_bins", "merge_bins", "busy", "deficits", "resistance", "slow_exprs", "stats", "thermal_fit"]


def _code(col: str, scale: float, df: pl.DataFrame) -> pl.Expr:
    return ((pl.col(col) / scale).round().fill_null(0).fill_nan(0).clip(0, 1023).cast(pl.Int64)
            if col in df.columns else pl.lit(0, dtype=pl.Int64))


def busy(raw: pl.DataFrame, metrics: list[str], interval: float, keys: Keys) -> pl.DataFrame:
    """Typed busy samples of ``raw`` (with its ``nid``) with their bucket and peer codes."""
    extra = [c for c in ("util", "power_limit_w") if c in raw.columns]
    df = raw.with_columns(pl.col("time").cast(pl.Float64), pl.col("gpu").cast(pl.Int64),
                          *[pl.col(m).cast(pl.Float64) for m in metrics + extra if m != "ppu"])
    ok = pl.col("sm_clock_mhz").is_not_null() & (pl.col("sm_clock_mhz") > 0)
    if "clock_event_reasons" in df.columns:
        df = df.with_columns(pl.col("clock_event_reasons").cast(pl.Int64).fill_null(0))
        ok = ok & ((pl.col("clock_event_reasons") & GPU_IDLE) == 0)
    else:
        df = df.with_columns(pl.lit(0, dtype=pl.Int64).alias("clock_event_reasons"))
    if "util" in df.columns:
        ok = ok & (pl.col("util").fill_null(100.0) >= 5.0)
    df = df.filter(ok).with_columns((pl.col("time") / interval).round().cast(pl.Int64).alias("bucket"))
    if "ppu" in metrics:  # power per utilisation point: power at a given utilisation
        df = df.with_columns((pl.col("power_w") / pl.col("util").clip(1.0, None)).alias("ppu"))
    nid = df.get_column("nid").to_numpy()
    peer, sku, jtype, small = keys.peer(nid, df.get_column("time").to_numpy())
    on_job = (peer % (1 << 33)) < (1 << 32)  # Keys.peer: a job's code, else 2**32 + the rack's
    own = np.where(on_job, peer, sku * (1 << 33) + (1 << 32) + (1 << 24) + nid.astype(np.int64))
    plim, ubin = _code("power_limit_w", 10.0, df), _code("util", 10.0, df)
    return df.with_columns(
        (pl.Series(peer, dtype=pl.Int64) + plim * (1 << 45)).alias("peer"),
        (pl.Series(own, dtype=pl.Int64) + plim * (1 << 45)).alias("own"),
        (pl.Series(sku, dtype=pl.Int64) * 1024 + plim).alias("sku"),
        ((pl.Series(sku, dtype=pl.Int64) * 1024 + plim) * 16 + ubin).alias("skuu"),
        pl.Series("jtype", jtype, dtype=pl.Int64),
        pl.Series("skub", sku, dtype=pl.Int64),
        (pl.Series(sku, dtype=pl.Int64) * (1 << 20) + pl.Series(keys.rack_of[nid], dtype=pl.Int64))
        .alias("rack"),
        pl.Series("small", small, dtype=pl.Boolean), pl.Series("on_job", on_job, dtype=pl.Boolean),
        plim.alias("plim"))


#: the signals compared only within the ``own`` group (the same workload)
WORKLOAD = ("power_w", "ppu", "throughput")


def stats(df: pl.DataFrame, metrics: list[str]
          ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Per-(bucket, group) sample counts and medians for the peer, SKU, rack and own groups (the
    SKU table also holds, per utilisation decile, the medians: ``med_<metric>_u``)."""
    def one(key: str, tag: str, ms: list[str]) -> pl.DataFrame:
        aggs = [pl.len().alias(f"n_{tag}")]
        aggs += [pl.col(m).median().alias(f"med_{m}_{tag}") for m in ms]
        return df.group_by(["bucket", key]).agg(aggs)
    thermal: list[str] = [m for m in ("temp_c", "power_w") if m in metrics]
    per_u = (df.group_by(["bucket", "sku", "skuu"])
             .agg(pl.len().alias("n_u"), *[pl.col(m).median().alias(f"med_{m}_u") for m in metrics]))
    sku = per_u.join(one("sku", "s", metrics), on=["bucket", "sku"])
    own = one("own", "o", [m for m in WORKLOAD if m in metrics])
    return one("peer", "p", metrics), sku, one("rack", "r", thermal), own


_FIT = {"skub": pl.Int64, "gpu": pl.Int64, "sxy": pl.Float64, "sxx": pl.Float64,
        "sdt": pl.Float64, "sdp": pl.Float64, "n": pl.UInt32}


def thermal_fit(df: pl.DataFrame) -> pl.DataFrame:
    """Per SKU (``skub``) and GPU index the sums of a least-squares fit through the origin of
    (temperature - rack median) on (power - rack median), outliers beyond 6 C left out. Summed
    over chunks: the SKU's thermal resistance is ``sxy / sxx`` over its GPUs, and each GPU
    index's mean residual is its slot's offset (``resistance``)."""
    if "dt" not in df.columns:
        return pl.DataFrame(schema=_FIT)
    ok = df.filter(pl.col("dt").abs() < 6.0)
    return ok.group_by("skub", "gpu").agg((pl.col("dt") * pl.col("dp")).sum().alias("sxy"),
                                          (pl.col("dp") ** 2).sum().alias("sxx"),
                                          pl.col("dt").sum().alias("sdt"), pl.col("dp").sum().alias("sdp"),
                                          pl.len().alias("n"))


def deficits(df: pl.DataFrame, groups: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | None, pl.DataFrame],
             opts: SlowOptions, metrics: list[str], resist: pl.DataFrame | None) -> pl.DataFrame:
    """Per sample: ``d_<metric>`` = value / peer median - 1 (temperature: difference in C; power
    and throughput per watt against the ``own`` group only), ``dt``/``dp`` (temperature and
    power minus the rack medians) and, given the thermal model per SKU (``resist``: ``skub``,
    ``r``, and per GPU slot ``off``), ``d_thermal`` (C above the model). ``groups``: the peer,
    SKU, rack and own tables of ``stats``."""
    peer, sku, rack, own = groups
    df = (df.join(peer, on=["bucket", "peer"]).join(sku, on=["bucket", "sku", "skuu"])
          .join(own, on=["bucket", "own"], how="left"))
    # a small job's GPUs go to the fleet when a fleet group has min_peers GPUs besides them:
    # the same utilisation decile first, else the SKU at that power limit (``wide``)
    mp = opts.min_peers
    fleet_u = pl.col("small") & (pl.col("n_u") - pl.col("n_p") >= mp)
    wide = pl.col("small") & ~fleet_u & (pl.col("n_s") - pl.col("n_p") >= mp)
    use_p = (pl.col("n_p") >= mp) & ~fleet_u & ~wide
    use_u = fleet_u | (~wide & (pl.col("n_u") >= mp))
    out = [pl.when(use_p).then(pl.col("n_p")).when(use_u).then(pl.col("n_u"))
           .otherwise(pl.col("n_s")).alias("peers"), wide.alias("wide"),
           (~use_p | ~pl.col("on_job")).alias("others"),
           (pl.col("small") & ~fleet_u & ~wide).alias("alone")]
    use_o = pl.col("n_o") >= mp
    for m in metrics:
        med = (pl.when(use_o).then(pl.col(f"med_{m}_o")) if m in WORKLOAD else
               pl.when(use_p).then(pl.col(f"med_{m}_p")).when(use_u).then(pl.col(f"med_{m}_u"))
               .when(pl.col("n_s") >= mp).then(pl.col(f"med_{m}_s")))
        out.append((pl.col(m) - med if m == "temp_c" else pl.col(m) / med - 1.0).alias(f"d_{m}"))
    if "throughput" in metrics and "power_w" in metrics:
        out.append(((pl.col("throughput") / pl.col("power_w"))
                    / pl.when(use_o).then(pl.col("med_throughput_o") / pl.col("med_power_w_o")) - 1.0)
                   .alias("d_ppw"))
    df = df.with_columns(out)
    if rack is not None and "med_temp_c_r" in rack.columns and "med_power_w_r" in rack.columns:
        df = df.join(rack, on=["bucket", "rack"], how="left").with_columns(
            pl.when(pl.col("n_r") >= opts.min_peers).then(pl.col("temp_c") - pl.col("med_temp_c_r"))
            .alias("dt"),
            (pl.col("power_w") - pl.col("med_power_w_r")).alias("dp"))
        if resist is not None:
            df = add_thermal(df, resist)
    return df


def history_bins(df: pl.DataFrame) -> pl.DataFrame:
    """Per GPU and power limit, counts of its busy SM clock in 5 MHz bins (exact to merge
    across chunks): the GPU's own history, its baseline when a small job has no fleet peers."""
    free = (pl.col("clock_event_reasons") & SW_POWER_CAP) == 0  # a capped clock is no baseline
    return (df.filter(free).select("nid", "gpu", "plim", (pl.col("sm_clock_mhz") / 5.0).round()
                                   .cast(pl.Int64).alias("bin"))
            .group_by("nid", "gpu", "plim", "bin").len().with_columns(pl.col("len").cast(pl.Int64)))


def merge_bins(bins: list[pl.DataFrame]) -> pl.DataFrame:
    """The counts of several ``history_bins`` tables summed per (GPU, power limit, bin)."""
    return (pl.concat(bins).group_by("nid", "gpu", "plim", "bin")
            .agg(pl.col("len").sum().cast(pl.Int64)))


def history(bins: list[pl.DataFrame]) -> pl.DataFrame:
    """The median busy SM clock of each (GPU, power limit) from the merged bins (``base``)."""
    if not bins:
        return pl.DataFrame(schema={"nid": pl.UInt32, "gpu": pl.Int64, "plim": pl.Int64,
                                    "base": pl.Float64})
    tot = merge_bins(bins)
    return (tot.sort("nid", "gpu", "plim", "bin")
            .with_columns(pl.col("len").cum_sum().over("nid", "gpu", "plim").alias("c"),
                          pl.col("len").sum().over("nid", "gpu", "plim").alias("n"))
            .filter(pl.col("c") * 2 >= pl.col("n")).group_by("nid", "gpu", "plim")
            .agg((pl.col("bin").first() * 5.0).alias("base")))


def add_history(df: pl.DataFrame, base: pl.DataFrame) -> pl.DataFrame:
    """``d_clock``: the SM-clock deviation, against the GPU's own history when it is ``alone``
    (a small job without fleet peers: its job peers are itself) and not power-capped (a
    capped clock is the cap's doing)."""
    df = df.join(base, on=["nid", "gpu", "plim"], how="left")
    hist = pl.col("sm_clock_mhz") / pl.col("base") - 1.0
    return df.with_columns(
        pl.when(pl.col("alone") & hist.is_not_null()
                & ((pl.col("clock_event_reasons") & SW_POWER_CAP) == 0))
        .then(pl.min_horizontal(pl.col("d_sm_clock_mhz"), hist))
        .otherwise(pl.col("d_sm_clock_mhz")).alias("d_clock")).drop("base")


def add_thermal(df: pl.DataFrame, resist: pl.DataFrame) -> pl.DataFrame:
    """``d_thermal`` = ``dt`` - R x ``dp`` - the slot's offset, with the SKU's thermal
    resistance R (C/W)."""
    return (df.join(resist.select("skub", "gpu", "r", "off"), on=["skub", "gpu"], how="left")
            .with_columns((pl.col("dt") - pl.col("r").fill_null(0.0) * pl.col("dp")
                           - pl.col("off").fill_null(0.0)).alias("d_thermal"))
            .drop("r", "off"))


def resistance(fits: list[pl.DataFrame]) -> pl.DataFrame:
    """The thermal model from the fits of every chunk: per SKU the thermal resistance ``r``
    (0 when power never varied) and per SKU and GPU index the slot's offset ``off``, the mean
    residual of that index over the fleet (where a GPU sits in the chassis: the rear row
    breathes air the front row has heated, the same on every node of the SKU)."""
    if not fits:
        return pl.DataFrame(schema={"skub": pl.Int64, "gpu": pl.Int64, "r": pl.Float64, "off": pl.Float64})
    per = pl.concat(fits).group_by("skub", "gpu").agg(pl.col("sxy", "sxx", "sdt", "sdp", "n").sum())
    r = per.group_by("skub").agg(pl.col("sxy").sum(), pl.col("sxx").sum()).select(
        "skub", pl.when(pl.col("sxx") > 0).then(pl.col("sxy") / pl.col("sxx")).otherwise(0.0).alias("r"))
    return per.join(r, on="skub").select(
        "skub", "gpu", "r", ((pl.col("sdt") - pl.col("r") * pl.col("sdp")) / pl.col("n")).alias("off"))


def slow_exprs(df: pl.DataFrame, limit: float, opts: SlowOptions) -> dict[str, pl.Expr]:
    """metric -> the expression that flags a sample bad for it (for the columns ``df`` has)."""
    clock_ok = pl.col("d_sm_clock_mhz") > -limit
    util_ok = pl.col("util") >= opts.min_util if "util" in df.columns else pl.lit(True)
    # against GPUs running other loads (fleet groups, or the rack when no job is known), a
    # power-capped clock is the cap's doing: how far a load pushes a GPU past its limit is the
    # load's. Within a job every GPU runs the same load, and a GPU capped lower than its job
    # peers is compared.
    capped = pl.col("others") & ((pl.col("clock_event_reasons") & SW_POWER_CAP) > 0)
    clock = "d_clock" if "d_clock" in df.columns else "d_sm_clock_mhz"
    out = {"sm_clock": (pl.col(clock) < -limit) & ~capped}
    if "d_ib_xmit_mbps" in df.columns:
        out["ib_xmit"] = pl.col("d_ib_xmit_mbps") < -opts.ib_deficit
    pcol = "d_ppu" if "d_ppu" in df.columns else "d_power_w"
    if pcol in df.columns:
        out["power"] = (pl.col(pcol) < -opts.power_deficit) & clock_ok & util_ok
    if "d_ppw" in df.columns:
        out["perf_per_watt"] = (pl.col("d_ppw") < -opts.ppw_deficit) & clock_ok & util_ok
    if "d_thermal" in df.columns:
        out["thermal"] = pl.col("d_thermal") > opts.thermal_c
    return out



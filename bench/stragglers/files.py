"""End-to-end speed and memory of ``minutiae stragglers FILE --json`` from files (issue 13, part 7).

    .venv/bin/python bench/stragglers/files.py [--repeats 3]
        [--only parquet,mid,csv,nodes,general,bigcsv,follow] [--ranks 100000 --steps 1000]

Writes once to ``bench/out/`` (plain numpy generator: log-normal 2 % noise, rank 4242 +10 % from
the middle step; ``step,rank,seconds``): ``parquet`` a Parquet file of RANKS x STEPS; ``mid`` a
10,000 x 2,000 Parquet, ``csv`` the same data as CSV (its wall is compared with ``mid``'s);
``nodes`` the 10,000 x 2,000 Parquet with ``node,gpu`` columns (what the simulator and StepTimer
write besides); ``general`` the 10,000 x 2,000 Parquet with one rank stopping half-way (rows
missing: the long-table path, not ``ingest``); ``bigcsv`` RANKS x STEPS as CSV. For each: the
whole CLI as a subprocess (wall; CPU seconds, user + system, from ``os.wait4``; its peak RSS
from its own VmHWM, ``CHILD``), and in the same run the
nvidia-resiliency-ext rule (``baseline.NvrxBaseline``) on the same file (read + scores), side by
side as a ratio; medians of ``--repeats``; the load (``os.getloadavg()``) while measuring.
``follow``: per-step latency of the ``--follow`` path at RANKS ranks (one step's CSV rows parsed
and fed to ``StragglerStream``), median over 20 steps after the warm-up.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "out"
SLOW_RANK = 4242


def make(ranks: int, steps: int, seed: int = 1, kind: str = "plain") -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    x = (1.0 * np.exp(rng.normal(0, 0.02, (steps, ranks)))).astype(np.float32)
    x[steps // 2:, SLOW_RANK % ranks] *= 1.10
    df = pl.DataFrame({
        "step": np.repeat(np.arange(steps, dtype=np.int32), ranks),
        "rank": np.tile(np.arange(ranks, dtype=np.int32), steps),
        "seconds": x.ravel()})
    if kind == "nodes":
        df = df.with_columns(
            pl.format("gpu{}", (pl.col("rank") // 8).cast(pl.String).str.zfill(5)).alias("node"),
            (pl.col("rank") % 8).cast(pl.Int8).alias("gpu"))
    elif kind == "general":  # a rank that stops half-way: cells missing
        df = df.filter((pl.col("rank") != 7) | (pl.col("step") < steps // 2))
    return df


def ensure(path: Path, ranks: int, steps: int, kind: str = "plain") -> Path:
    if not path.exists():
        df = make(ranks, steps, kind=kind)
        tmp = path.with_suffix(path.suffix + ".tmp")
        if path.suffix == ".csv":
            df.write_csv(tmp)
        else:
            df.write_parquet(tmp)
        tmp.rename(path)
    return path


#: the ``minutiae`` entry point, writing its own peak RSS (VmHWM) to $PEAK_FILE at exit:
#: ``ru_maxrss`` of a child starts at the parent's peak (Linux carries it through fork and
#: exec), and this process holds the NVRx rule's tables (5 GB at 100k x 1k) between runs
CHILD = """
import atexit, os, sys
def _peak():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            open(os.environ['PEAK_FILE'], 'w').write(line.split()[1])
atexit.register(_peak)
from minutiae.cli.main import main
sys.exit(main())
"""


def cli(path: Path) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MiB, exit status) of one ``minutiae stragglers PATH --json``."""
    peak = OUT / "peak.txt"
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", CHILD, "stragglers", str(path), "--json"],
                         stdout=subprocess.DEVNULL, env={**os.environ, "PEAK_FILE": str(peak)})
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return (time.perf_counter() - t0, ru.ru_utime + ru.ru_stime,
            int(peak.read_text()) / 1024, p.returncode)


def nvrx(path: Path) -> float:
    """Wall seconds of the NVRx rule on the same file: read, (steps, ranks) matrix, scores."""
    from minutiae.analyses.stragglers.baseline import NvrxBaseline

    t0 = time.perf_counter()
    cols = ["step", "rank", "seconds"]
    df = pl.read_csv(path, columns=cols) if path.suffix == ".csv" else pl.read_parquet(
        path, columns=cols)
    step, rank = df["step"].to_numpy(), df["rank"].to_numpy()
    steps, si = np.unique(step, return_inverse=True)
    ranks = int(rank.max()) + 1
    x = np.full((steps.size, ranks), np.nan, dtype=np.float32)  # missing cells stay NaN
    x[si, rank] = df["seconds"].to_numpy()
    b = NvrxBaseline(ranks)
    with warnings.catch_warnings():  # a rank stopped: its windows are all NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        b.update(x, steps)
    return time.perf_counter() - t0


def measure(name: str, path: Path, repeats: int) -> dict[str, float]:
    walls, cpus, rss, base, loads = [], [], [], [], []
    rc = 0
    for _ in range(repeats):
        w, c, r, rc = cli(path)
        walls.append(w)
        cpus.append(c)
        rss.append(r)
        loads.append(os.getloadavg()[0])
        base.append(nvrx(path))
    row = {"wall": float(np.median(walls)), "cpu": float(np.median(cpus)),
           "rss": float(np.max(rss)), "nvrx": float(np.median(base)),
           "load": float(np.median(loads))}
    print(f"{name:28s} minutiae {row['wall']:7.2f} s wall {row['cpu']:6.2f} s CPU "
          f"{row['rss']:7.0f} MiB peak (exit {rc}) | nvrx rule {row['nvrx']:6.2f} s | ratio "
          f"{row['wall'] / row['nvrx']:5.2f} | load {row['load']:.1f} | n={repeats} "
          f"walls={[round(w, 2) for w in walls]} cpus={[round(c, 2) for c in cpus]}",
          flush=True)
    return row


def follow(ranks: int, steps: int = 60) -> None:
    from minutiae.analyses.stragglers.analysis import Options
    from minutiae.analyses.stragglers.parse import parse_csv
    from minutiae.analyses.stragglers.stream import StragglerStream

    df = make(ranks, steps)
    header = "step,rank,seconds"
    stream = StragglerStream(Options(), "bench", None)
    lat, cpu = [], []
    for s in range(steps):
        chunk = df.filter(pl.col("step") == s).write_csv(include_header=False).encode()
        t0, c0 = time.perf_counter(), time.process_time()
        stream.feed(parse_csv(chunk, "bench", header))
        if s >= steps - 20:
            lat.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    print(f"follow {ranks:,} ranks: per-step latency median {np.median(lat) * 1e3:.1f} ms "
          f"(p90 {np.percentile(lat, 90) * 1e3:.1f} ms; CPU {np.median(cpu) * 1e3:.1f} ms; "
          f"20 steps after {steps - 20}) | load {os.getloadavg()[0]:.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=1_000)
    ap.add_argument("--only", default="parquet,mid,csv,nodes,general,follow")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    only = set(a.only.split(","))
    print(f"cpus {os.cpu_count()}, load before {os.getloadavg()}", flush=True)
    big = f"{a.ranks // 1000}k_x_{a.steps}"
    rows: dict[str, dict[str, float]] = {}
    if "parquet" in only:
        rows["parquet"] = measure(f"{big} parquet", ensure(OUT / f"{big}.parquet", a.ranks,
                                                          a.steps), a.repeats)
    mid = "10k_x_2000"
    for key, kind, suffix in (("mid", "plain", "parquet"), ("csv", "plain", "csv"),
                              ("nodes", "nodes", "parquet"), ("general", "general", "parquet")):
        if key in only:
            name = mid if kind == "plain" else f"{mid}_{kind}"
            rows[key] = measure(f"{name} {suffix}",
                                ensure(OUT / f"{name}.{suffix}", 10_000, 2_000, kind), a.repeats)
    if "csv" in rows and "mid" in rows:
        print(f"CSV / Parquet wall ratio (10k x 2k) {rows['csv']['wall'] / rows['mid']['wall']:.2f}"
              f", CPU ratio {rows['csv']['cpu'] / rows['mid']['cpu']:.2f}")
    if "bigcsv" in only:
        rows["bigcsv"] = measure(f"{big} csv", ensure(OUT / f"{big}.csv", a.ranks, a.steps),
                                 a.repeats)
    if "follow" in only:
        follow(a.ranks)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

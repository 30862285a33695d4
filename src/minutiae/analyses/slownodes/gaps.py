"""Telemetry gaps (pure): windows in which a GPU or a whole node sent nothing while the fleet
did, and fleet nodes that never reported: UNKNOWN there, never healthy.

``Gaps`` is fed one chunk of ``(nid, gpu, time)`` at a time, in time order (chunks hold whole
sample times), and keeps per GPU only its last sample time: bounded memory."""

from __future__ import annotations

import polars as pl

from minutiae.analyses.slownodes.core import SlowUnknown

__all__ = ["Gaps"]


class Gaps:
    def __init__(self, interval: float, min_gap: float) -> None:
        self.interval = interval
        self.min_gap = max(min_gap, 1.5 * interval)
        self.last = pl.DataFrame(schema={"nid": pl.UInt32, "gpu": pl.Int64, "last": pl.Float64})
        self.found: list[tuple[int, int, float, float]] = []
        self.t_min = float("inf")
        self.t_max = float("-inf")
        self.firsts: dict[tuple[int, int], float] = {}

    def feed(self, seen: pl.DataFrame) -> None:
        """``seen``: the chunk's ``nid, gpu, time`` rows (any order, duplicates allowed)."""
        if seen.height == 0:
            return
        t = seen.select(pl.col("time").cast(pl.Float64)).get_column("time")
        self.t_min = min(self.t_min, float(t.min()))  # type: ignore[arg-type]
        self.t_max = max(self.t_max, float(t.max()))  # type: ignore[arg-type]
        df = (seen.select("nid", pl.col("gpu").cast(pl.Int64), pl.col("time").cast(pl.Float64))
              .unique().join(self.last, on=["nid", "gpu"], how="left").sort("nid", "gpu", "time"))
        for a, b, f in (df.filter(pl.col("last").is_null()).group_by("nid", "gpu")
                        .agg(pl.col("time").min()).iter_rows()):
            self.firsts.setdefault((int(a), int(b)), float(f))
        prev = pl.col("time").shift(1).over(["nid", "gpu"]).fill_null(pl.col("last"))
        gaps = df.with_columns(prev.alias("prev")).filter(
            pl.col("time") - pl.col("prev") >= self.min_gap + self.interval)
        self.found += [(int(a), int(b), float(p) + self.interval, float(c))
                       for a, b, c, p in gaps.select("nid", "gpu", "time", "prev").iter_rows()]
        new_last = df.group_by("nid", "gpu").agg(pl.col("time").max().alias("last"))
        self.last = (pl.concat([self.last, new_last]).group_by("nid", "gpu")
                     .agg(pl.col("last").max()))

    def result(self, names: list[str], fleet_nodes: list[str]) -> list[SlowUnknown]:
        """Every gap (a GPU's, merged into its node's when all its GPUs share it, leading and
        trailing gaps included) and every fleet node absent from the telemetry."""
        end = self.t_max + self.interval
        raw = list(self.found)
        for nid, gpu, last in self.last.iter_rows():
            if end - (last + self.interval) >= self.min_gap:
                raw.append((int(nid), int(gpu), float(last) + self.interval, end))
        raw += [(n, g, self.t_min, f) for (n, g), f in self.firsts.items()
                if f - self.t_min >= self.min_gap]
        per_node = self.last.group_by("nid").agg(pl.col("gpu").n_unique().alias("n"))
        n_gpus = dict(per_node.iter_rows())
        out: list[SlowUnknown] = []
        by: dict[tuple[int, int, int], set[int]] = {}
        for nid, gpu, a, b in raw:
            by.setdefault((nid, round(a / self.interval), round(b / self.interval)), set()).add(gpu)
        for (nid, a, b), gpus in sorted(by.items()):
            start, stop = a * self.interval, b * self.interval
            if len(gpus) >= n_gpus.get(nid, 0):
                out.append(SlowUnknown(names[nid], None, start, stop, "gap"))
            else:
                out += [SlowUnknown(names[nid], g, start, stop, "gap") for g in sorted(gpus)]
        seen = set(names)
        out += [SlowUnknown(n, None, self.t_min, end, "absent")
                for n in sorted(set(fleet_nodes) - seen)]
        return out

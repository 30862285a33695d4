"""Telemetry gaps (pure): windows in which a GPU or a whole node sent nothing while the fleet
did, and fleet nodes that never reported: UNKNOWN there, never healthy.

``Gaps`` is fed one chunk of ``(nid, gpu, time)`` at a time, in time order (chunks hold whole
sample times), and keeps per GPU only its last sample time: bounded memory."""

from __future__ import annotations

import numpy as np
import polars as pl

from minutiae.analyses.slownodes.core import SlowUnknown

__all__ = ["Gaps"]


class Gaps:
    def __init__(self, interval: float, min_gap: float) -> None:
        self.interval = interval
        self.min_gap = max(min_gap, 1.5 * interval)
        #: per (node index, GPU) its last sample time so far
        self.last: dict[tuple[int, int], float] = {}
        self.found: list[tuple[int, int, float, float]] = []
        self.t_min = float("inf")
        self.t_max = float("-inf")
        self.firsts: dict[tuple[int, int], float] = {}

    def feed(self, seen: pl.DataFrame) -> None:
        """``seen``: the chunk's ``nid, gpu, time`` rows (any order, duplicates allowed: a
        repeated time is a step of 0). One sort by (GPU, time) in numpy; each GPU's first step
        is from its last time in the chunks before."""
        if seen.height == 0:
            return
        nid = seen.get_column("nid").cast(pl.Int64).to_numpy()
        gpu = seen.get_column("gpu").cast(pl.Int64).to_numpy()
        t = seen.get_column("time").cast(pl.Float64).to_numpy()
        self.t_min = min(self.t_min, float(np.nanmin(t)))
        self.t_max = max(self.t_max, float(np.nanmax(t)))
        order = np.lexsort((t, gpu, nid))
        nid, gpu, t = nid[order], gpu[order], t[order]
        first = np.ones(t.size, dtype=bool)
        first[1:] = (nid[1:] != nid[:-1]) | (gpu[1:] != gpu[:-1])
        heads = np.flatnonzero(first)
        prev = np.empty_like(t)
        prev[1:] = t[:-1]
        keys = list(zip(nid[heads].tolist(), gpu[heads].tolist(), strict=True))
        prev[heads] = [self.last.get(k, np.nan) for k in keys]
        for k, f in zip(keys, t[heads].tolist(), strict=True):
            if k not in self.last:
                self.firsts.setdefault(k, f)
        with np.errstate(invalid="ignore"):
            gap = np.flatnonzero(t - prev >= self.min_gap + self.interval)
        self.found += [(a, b, p + self.interval, c) for a, b, p, c in
                       zip(nid[gap].tolist(), gpu[gap].tolist(), prev[gap].tolist(), t[gap].tolist(),
                           strict=True)]
        for k, v in zip(keys, np.fmax.reduceat(t, heads).tolist(), strict=True):
            old = self.last.get(k)
            self.last[k] = v if old is None or not old >= v else old

    def result(self, names: list[str], fleet_nodes: list[str]) -> list[SlowUnknown]:
        """Every gap (a GPU's, merged into its node's when all its GPUs share it, leading and
        trailing gaps included) and every fleet node absent from the telemetry."""
        end = self.t_max + self.interval
        raw = list(self.found)
        for (nid, gpu), last in self.last.items():
            if end - (last + self.interval) >= self.min_gap:
                raw.append((nid, gpu, last + self.interval, end))
        raw += [(n, g, self.t_min, f) for (n, g), f in self.firsts.items()
                if f - self.t_min >= self.min_gap]
        n_gpus: dict[int, int] = {}
        for nid, _gpu in self.last:
            n_gpus[nid] = n_gpus.get(nid, 0) + 1
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

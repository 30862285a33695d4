"""The tail sample's histogram on a fixed grid (``calib.tail_threshold``): ``np.histogram``'s
counts for equal bins over a given range, its own arithmetic step by step (the same types, so
the same bins to the last ulp), without its per-call set-up: the grids are the same few, so
their edges and centres are cached (~40 -> ~15 us for a refit's few thousand values; every
refit of every series takes two)."""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["histogram"]


@functools.lru_cache(maxsize=64)
def _grid(lo: float, hi: float, bins: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    edges = np.linspace(lo, hi, bins + 1, endpoint=True, dtype=dtype)
    centres = (edges[:-1] + edges[1:]) / 2
    edges.flags.writeable = centres.flags.writeable = False
    return edges, centres


def histogram(a: np.ndarray, lo: float, hi: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.histogram(a, bins, range=(lo, hi))`` of a 1-D ``a``: the counts (values outside
    the range and NaN left out, the last bin closed) and the bins' centres (read-only)."""
    edges, centres = _grid(lo, hi, bins, np.result_type(lo, hi, a))
    keep = a >= lo
    keep &= a <= hi
    if not np.logical_and.reduce(keep):
        a = a[keep]
    a = a.astype(edges.dtype, copy=False)
    denom = np.subtract(hi, lo, dtype=np.result_type(hi, lo))
    idx = ((np.subtract(a, lo, dtype=np.result_type(a, lo)) / denom) * bins).astype(np.intp)
    idx[idx == bins] -= 1
    idx[a < edges[idx]] -= 1  # within ~1 ulp of an edge the division can be off by one
    idx[(a >= edges[idx + 1]) & (idx != bins - 1)] += 1
    return np.bincount(idx, minlength=bins), centres

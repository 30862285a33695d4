"""Medians along the rank axis, fast for the short rows of small jobs and sampled for huge
groups (pure numpy; shared by the peer reference, the node test and the detector)."""

from __future__ import annotations

import warnings

import numpy as np

#: peer medians use at most this many ranks of a group (evenly strided): the median of 2,048
#: values is within 0.03 sigma of the whole group's, common to all its ranks
MEDIAN_SAMPLE = 2048

#: rows up to this long take their median by sorting (numpy's partition costs ~2 us a row in
#: setup: 10x a sort for the 8-128-value rows of small jobs)
SORT_MEDIAN_MAX = 512


def fast_median(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """``np.median`` along ``axis``, NaN-aware (``nanmedian``) when NaN is present; short rows
    are sorted instead of partitioned (same values)."""
    if np.isnan(a).any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.asarray(np.nanmedian(a, axis=axis))
    n = a.shape[axis]
    if n == 0 or n > SORT_MEDIAN_MAX:
        return np.asarray(np.median(a, axis=axis))
    srt = np.sort(a, axis=axis)
    lo = np.asarray(np.take(srt, (n - 1) // 2, axis=axis))
    if n % 2:
        return lo
    return np.asarray((lo + np.take(srt, n // 2, axis=axis)) / 2)


def _sample(cols: np.ndarray) -> np.ndarray | slice:
    """The columns a group's median is taken over (a slice when they are contiguous)."""
    step = max(1, cols.size // MEDIAN_SAMPLE)
    picked = cols[::step]
    if picked.size and np.array_equal(picked, np.arange(picked[0], picked[-1] + 1, step)):
        return slice(int(picked[0]), int(picked[-1]) + 1, step)
    return picked


def group_medians(logx: np.ndarray, members: list[np.ndarray]) -> np.ndarray:
    """(steps, groups) medians of ``logx`` (steps, ranks) over each group's columns; NaN-aware."""
    out = np.empty((logx.shape[0], len(members)), dtype=np.float32)
    for g, cols in enumerate(members):
        out[:, g] = fast_median(logx[:, _sample(cols)], axis=1)
    return out

"""The actionable floor (``--min-slowdown``) and the list of slowest GPUs below it.

A persistent offset of 1-2 % between GPUs of one model is normal (the silicon lottery, power and
thermal limits: measured GPU-to-GPU spreads of ~1 % sd), and a wandering GPU (power capping,
AR(1) with phi 0.9-0.97) drifts 1-2 % for tens of steps. Both are real, both are detectable
over enough steps, neither is a fault anyone would replace hardware for. The floor (default
3 %) is what a suspect must reach: its estimate at least ``KEEP_SHARE`` of the floor and its
95 % interval reaching the floor. Below it, the slowest GPUs are listed by their slowdown over
every step tested, with what they cost the job, for the replace-or-not question.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from minutiae.analyses.stragglers.detect import SeriesDetector
from minutiae.analyses.stragglers.locate import RankMeta
from minutiae.analyses.stragglers.types import SlowGpu, Suspect

DEFAULT_MIN_SLOWDOWN = 0.03
#: a suspect's point estimate must reach this share of the floor (its interval the floor)
KEEP_SHARE = 0.8
SLOWEST_LISTED = 10
#: spreads of the job's GPU-to-GPU offsets an offset present from the start must reach
SPREAD_Z = 4.0
#: suspects below NEAR floors must still be slower by STILL_SHARE of the floor at the end
NEAR = 2.0
STILL_SHARE = 0.5


def size(s: Suspect) -> float:
    """A suspect's slowdown for the floor: its mean since onset, or its size when found if
    larger (a transient fault averages out after it ends)."""
    return max(s.slowdown, s.peak) if np.isfinite(s.peak) else s.slowdown


def spread(det: SeriesDetector) -> float:
    """The job's GPU-to-GPU spread: 1.4826 x MAD across ranks of each rank's mean log-ratio
    over every step tested (the silicon lottery plus what noise leaves in a mean)."""
    ok = det.total_n >= 1
    m = det.total_r[ok] / det.total_n[ok]
    return float(1.4826 * np.median(np.abs(m - np.median(m)))) if m.size >= 8 else 0.0


def above_floor(suspects: list[Suspect], floor: float, warm_end: int,
                job_spread: float, still: Callable[[Suspect], float] | None = None,
                offset: Callable[[Suspect], float] | None = None,
                ) -> tuple[list[Suspect], int]:
    """The suspects that reach the floor, and how many alarms did not.

    A slowdown present since the data starts (``since_step`` up to ``warm_end``, the last
    warm-up step number) is also judged against the job's own GPU-to-GPU spread: it must reach
    ``SPREAD_Z`` spreads (a 1 % lottery puts 1 GPU in 750 beyond 3 %; beyond 4 spreads, 1 in
    30,000), so the lottery's tail is listed, not blamed, while a node or GPU slow from step 0
    by more than that is found. A later one is judged on what is new: its size less
    ``offset(s)``, the median ratio its ranks already had in the warm-up (a GPU 1.5 % behind by
    its lottery and 2 % more by a wander is 2 % slower than it was). Within ``NEAR`` floors it
    must still be slow: ``still(s)`` (its mean log-ratio over its last steps) at least
    ``STILL_SHARE`` of the floor (a wandering GPU drifts to the floor and back; a faulty one
    stays)."""
    if floor <= 0:
        return suspects, 0

    def ok(s: Suspect) -> bool:
        need = floor
        if s.since_step <= warm_end:
            need = max(floor, float(np.expm1(SPREAD_Z * job_spread)))
            return s.slowdown >= KEEP_SHARE * need and s.ci_high >= need
        # a transient fault (a 30 % fail-slow for 20 minutes of a long job) averages out
        # below the floor after it ends: its size when found counts too
        big = size(s)
        if offset is not None:  # what it already had in the warm-up (its lottery) is not new
            big = float(np.expm1(np.log1p(big) - max(offset(s), 0.0)))
        if still is not None and big < NEAR * need and not (
                still(s) >= STILL_SHARE * float(np.log1p(floor))):
            return False
        return big >= KEEP_SHARE * need and max(s.ci_high, big) >= need

    keep = [s for s in suspects if ok(s)]
    return keep, len(suspects) - len(keep)


def slowest(meta: RankMeta, det: SeriesDetector, share: float, job_gpus: int,
            exclude: set[int], rho: float) -> tuple[SlowGpu, ...]:
    """The ``SLOWEST_LISTED`` slowest ranks that are not suspects (positive slowdown only).
    The interval widens the independent-steps standard error by ``sqrt((1 + rho) / (1 - rho))``
    (the AR(1) long-run factor, ``rho`` the warm-up's lag-1 autocorrelation)."""
    n = np.maximum(det.total_n, 1.0)
    mean = det.total_r / n
    mean[det.total_n < 1] = -np.inf
    if exclude:
        mean[[i for i in range(mean.size) if int(meta.ranks[i]) in exclude]] = -np.inf
    order = np.argsort(-mean, kind="stable")[:SLOWEST_LISTED]
    widen = float(np.sqrt((1.0 + rho) / (1.0 - rho))) if -1.0 < rho < 1.0 else 1.0
    out = []
    for i in order.tolist():
        m = float(mean[i])
        if not m > 0:
            break
        se = float(det.sigma[i]) / float(np.sqrt(n[i])) * widen
        node = meta.node[i]
        gpu = int(meta.gpu[i]) if meta.gpu[i] >= 0 else None
        comp = (f"rank:{int(meta.ranks[i])}" if node is None
                else f"gpu:{node}/{gpu}" if gpu is not None else f"gpu:{node}/rank{int(meta.ranks[i])}")
        job = float(np.expm1(m)) * share
        out.append(SlowGpu(int(meta.ranks[i]), node, gpu, comp, float(np.expm1(m)),
                           float(np.expm1(m - 1.96 * se)), float(np.expm1(m + 1.96 * se)),
                           job, job * job_gpus * 24))
    return tuple(out)


def lag1(r: np.ndarray) -> float:
    """Pooled lag-1 autocorrelation of each rank's warm-up ratios (each rank demeaned; NaN
    ignored; 0 when too short)."""
    if r.shape[0] < 4:
        return 0.0
    x = r - np.nanmean(r, axis=0, keepdims=True)
    a, b = x[1:], x[:-1]
    ok = np.isfinite(a) & np.isfinite(b)
    num = float(np.sum(np.where(ok, a * b, 0.0)))
    den = float(np.sum(np.where(ok, a * a, 0.0)))
    return max(min(num / den, 0.99), 0.0) if den > 0 else 0.0

"""Slowness that moves between ranks is workload, not hardware.

A hot expert in a mixture-of-experts job, or data-dependent imbalance, makes one rank slow for
tens of steps and then another: every rank that was hot alarms, and each alarm looks like a
slow GPU. A hardware fault stays; a workload hot spot recovers and reappears elsewhere. So:
a suspect whose ranks' mean ratio over their last ``detect.RECENT`` steps is below
``RECOVERED`` of its slowdown has recovered; when at least ``MIN_MOVES`` suspects on different
ranks recovered (now, or for ``LAST`` steps at any time since they alarmed: ``Recovery``; a
hot expert may come back to a rank it left), the job's slowness moves and every suspect of that kind that is not
persistent (slower by at least ``PART`` of its size on ``PERSISTENT`` of the last
``detect.RECENT`` steps since its onset, and at least ``HOLD`` steps) is reported in one
workload-imbalance finding (its ranks, size and pattern) instead of hardware. A fault in such
a job is a suspect once it has held ``HOLD`` steps.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from minutiae.analyses.stragglers.floor import DEFAULT_MIN_SLOWDOWN, KEEP_SHARE
from minutiae.analyses.stragglers.floor import size as size_of
from minutiae.analyses.stragglers.recovery import LAST
from minutiae.analyses.stragglers.types import Basis, Scope, Suspect, WorkloadImbalance

RECOVERED = 0.33
MIN_MOVES = 2
#: a hardware slowdown is there on this share of the last ``detect.RECENT`` steps...
PERSISTENT = 0.9
#: ...at a quarter of its size or more
PART = 0.25
#: tested steps a slowdown must have lasted to be hardware in a job whose slowness moves
HOLD = 50


def _ratios(rows: np.ndarray, s: Suspect, index: dict[int, int]) -> np.ndarray:
    return rows[:, [index[r] for r in s.ranks]]


def still_slow(rows: np.ndarray, index: dict[int, int]) -> Callable[[Suspect], float]:
    """A suspect's ranks' median mean log-ratio over their last ``LAST`` tested steps."""
    return lambda s: _now(_ratios(rows, s, index))


#: tested steps since its onset a GPU's median level needs (fewer: no robust level)
LEVEL_STEPS = 10


def level(rows: np.ndarray, index: dict[int, int], steps: np.ndarray,
          ) -> Callable[[Suspect], float]:
    """A GPU suspect's robust level: the median over its ranks of each rank's median log-ratio
    over its tested steps since its onset (the last ``rows``, at most ``detect.RECENT``); NaN
    for a node (its ranks' ratios may be taken within the node, which a node's slowdown does
    not move) or with fewer than ``LEVEL_STEPS`` steps. A hot expert that takes its turn on
    each rank of its expert-parallel group (every logged step at the simulator's cadence) is
    +12 % on an eighth of a rank's steps: +1.5 % on its mean, next to nothing on its median;
    a hardware slowdown moves both alike."""
    def of(s: Suspect) -> float:
        if s.scope is not Scope.GPU:
            return float("nan")
        since = int(steps.size - np.searchsorted(steps, s.since_step))
        sub = _ratios(rows, s, index)[-min(max(since, 1), rows.shape[0]):]
        ok = np.isfinite(sub).sum(axis=0) >= LEVEL_STEPS
        if not ok.any():
            return float("nan")
        return float(np.median(np.nanmedian(sub[:, ok], axis=0)))
    return of


def _now(rows: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        v = np.nanmean(rows[-LAST:], axis=0)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else float("nan")


def _persistent(rows: np.ndarray, size: float, since: int) -> bool:
    """Slower by ``PART`` of ``size`` on ``PERSISTENT`` of the steps since its onset (the
    last ``since`` tested steps, at most the window), which are at least ``HOLD``."""
    if min(since, rows.shape[0]) < HOLD:
        return False
    rows = rows[-since:]
    ok = np.isfinite(rows)
    n = ok.sum(axis=0)
    share = np.where(n > 0, ((rows > PART * size) & ok).sum(axis=0) / np.maximum(n, 1), 0.0)
    return bool(n.min() >= rows.shape[0] // 2 and np.median(share) >= PERSISTENT)


def split_moving(suspects: list[Suspect], rows: np.ndarray, index: dict[int, int],
                 steps: np.ndarray, floor: float, low: np.ndarray | None = None,
                 ) -> tuple[list[Suspect], WorkloadImbalance | None]:
    """(hardware suspects, the workload finding or None). ``rows`` are the last tested steps'
    log-ratios of every rank index (oldest first); ``index`` maps rank ids to indices;
    ``steps`` the steps tested; ``low`` per rank index ``Recovery.low``; only alarms of at least ``KEEP_SHARE`` x ``floor`` count (a
    GPU wandering below the floor is no evidence of moving work)."""
    floor = max(floor, DEFAULT_MIN_SLOWDOWN)  # --min-slowdown 0 shows more, not less

    # sizes when found as the tests saw them (``held=False``): what makes a hot spot's
    # evidence is unchanged by the floor's held size (the week's workload findings alike)
    def eligible(s: Suspect) -> bool:
        return (s.basis is not Basis.COMMUNICATION and s.scope in (Scope.GPU, Scope.NODE)
                and size_of(s, held=False) >= KEEP_SHARE * floor)

    def since(s: Suspect) -> int:
        return int(steps.size - np.searchsorted(steps, s.since_step))

    def recovered(s: Suspect) -> bool:
        bar = RECOVERED * float(np.log1p(size_of(s, held=False)))
        was = low is not None and float(np.median(low[[index[r] for r in s.ranks]])) < bar
        return was or _now(_ratios(rows, s, index)) < bar

    gone = [s for s in suspects if eligible(s) and recovered(s)]
    if len({s.rank for s in gone}) < MIN_MOVES:
        return suspects, None
    moving = [s for s in suspects if eligible(s) and (
        s in gone or not _persistent(_ratios(rows, s, index), float(np.log1p(s.slowdown)),
                                     since(s)))]
    keep = [s for s in suspects if s not in moving]
    ranks = sorted({r for s in moving for r in s.ranks})
    size = float(np.median([s.slowdown for s in moving]))
    pattern = (f"slowness moved between {len(ranks)} rank(s) on "
               f"{len({s.node for s in moving})} node(s): {len(gone)} recovered, "
               f"{len(moving) - len(gone)} intermittent or recent; median +{size:.1%} while slow "
               "(a hot expert or data-dependent imbalance, not a GPU or node fault)")
    return keep, WorkloadImbalance(tuple(ranks), len(moving), len(gone), size,
                                   min(s.since_step for s in moving), pattern)

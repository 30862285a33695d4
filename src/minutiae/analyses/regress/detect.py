"""Change points in each signature's performance series (pure).

Method: work on ``log(step time)`` so shifts are ratios; estimate the run-to-run noise ``sigma``
robustly (MAD of successive differences, so level shifts do not inflate it); winsorise outlier
runs to a rolling median ± ``winsor``·sigma; segment with ruptures' PELT (``KernelCPD`` with the
linear kernel, i.e. the least-squares cost, C implementation) under a penalty of
``penalty``·sigma²·ln n; then confirm each cut with a z-test of the adjacent segment means using the
series-wide sigma (noise-aware: a 3-run segment is judged against the noise of the whole series),
dropping the weakest failing cut and re-testing until all pass ``alpha`` and ``min_change``.

A second, online stage (``regress_online``: a one-sided CUSUM, the fastest test of a shift of
known size) watches the newest runs: a regression it raised that the search cannot confirm yet
(too few runs after it) is reported as ``young``, with the p-value of the runs since it.
"""

from __future__ import annotations

import math
import tomllib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt
import ruptures as rpt
from scipy import stats

from minutiae.analyses.regress.online import OnlineParams, online_alarms, open_alarm
from minutiae.errors import ConfigError
from minutiae.history.record import RunRecord

F64 = npt.NDArray[np.float64]
#: sigma never falls below this (log units): perfectly flat series are not infinitely sensitive
SIGMA_FLOOR = 1e-4
MEDIAN_SE = math.sqrt(math.pi / 2.0)


@dataclass(frozen=True, slots=True)
class DetectorParams:
    penalty: float = 3.5
    min_size: int = 3
    alpha: float = 0.001
    min_change: float = 0.005
    winsor: float = 3.0
    window: int = 5
    online: OnlineParams = OnlineParams()


class Stage(Enum):
    """``confirmed``: a cut of the change-point search that passed its z-test (p < alpha).
    ``young``: a regression the online CUSUM raised among the newest runs that the search cannot
    confirm yet; its p-value (runs since it against the level before) says how sure it is."""

    CONFIRMED = "confirmed"
    YOUNG = "young"


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """A lasting shift in one signature's step time.

    ``index``/``run_id``/``time``: the first run after the change. ``change``: exp(Δ mean log step
    time) − 1 between the segment before and after (+0.03 = 3 % slower; negative = faster).
    ``p_value``: two-sided z-test of the two segment means with the series' robust noise ``sigma``
    (log units); ``confidence`` = 1 − p_value. ``n_before``/``n_after``: runs in the two segments
    (few runs after = a young change, said so by ``confidence``). ``before_s``/``after_s``: median
    step time (seconds, or the rate for tokens/s series) of the two segments.
    """

    signature: str
    index: int
    run_id: str
    time: float
    change: float
    p_value: float
    confidence: float
    n_before: int
    n_after: int
    before_s: float
    after_s: float
    sigma: float
    stage: Stage = Stage.CONFIRMED

    def to_json(self) -> dict[str, Any]:
        return {
            "signature": self.signature, "run_id": self.run_id, "time": self.time,
            "change": round(self.change, 6), "p_value": self.p_value,
            "confidence": round(self.confidence, 6), "index": self.index,
            "n_before": self.n_before, "n_after": self.n_after,
            "before": self.before_s, "after": self.after_s, "noise": round(self.sigma, 6),
            "stage": self.stage.value,
        }


@dataclass(frozen=True, slots=True)
class Cut:
    """A confirmed cut in a bare series (indices into it)."""

    index: int
    change: float
    p_value: float
    n_before: int
    n_after: int
    stage: Stage = Stage.CONFIRMED


def load_params(text: str | None = None) -> DetectorParams:
    """The shipped ``regress.toml`` (or ``text``), validated."""
    raw = text if text is not None else resources.files("minutiae.analyses.regress").joinpath(
        "regress.toml").read_text(encoding="utf-8")
    try:
        data = tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"regress.toml: {exc}") from None
    det = data.get("detector")
    if not isinstance(det, dict):
        raise ConfigError("regress.toml: missing [detector] table")
    fields = set(DetectorParams.__dataclass_fields__) - {"online"}   # its own [online] table
    unknown = set(det) - set(fields)
    if unknown:
        raise ConfigError(f"regress.toml: unknown key(s) {', '.join(sorted(unknown))}")
    try:
        p = DetectorParams(**{k: type(getattr(DetectorParams(), k))(v) for k, v in det.items()})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"regress.toml: {exc}") from None
    if not (p.penalty > 0 and p.min_size >= 2 and 0 < p.alpha < 1 and p.min_change >= 0
            and p.winsor > 0 and p.window >= 1):
        raise ConfigError(f"regress.toml: out-of-range value in {p}")
    return replace(p, online=_online_params(data.get("online", {})))


def _online_params(raw: object) -> OnlineParams:
    if not isinstance(raw, dict):
        raise ConfigError("regress.toml: [online] must be a table")
    unknown = set(raw) - set(OnlineParams.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"regress.toml: [online] unknown key(s) {', '.join(sorted(unknown))}")
    try:
        o = OnlineParams(**{k: type(getattr(OnlineParams(), k))(v) for k, v in raw.items()})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"regress.toml: [online] {exc}") from None
    if not (o.k > 0 and o.h > 0 and o.clip > o.k and o.outlier >= o.clip and o.warmup >= 3
            and o.min_change >= 0 and o.hold >= 1 and 0 < o.alpha < 1 and o.max_noise > 0):
        raise ConfigError(f"regress.toml: [online] out-of-range value in {o}")
    return o


def robust_sigma(y: F64) -> float:
    """Run-to-run noise (log units) from the MAD of successive differences (shift-robust)."""
    if y.size < 3:
        return SIGMA_FLOOR
    d = np.diff(y)
    mad = float(np.median(np.abs(d - np.median(d))))
    return max(1.4826 * mad / math.sqrt(2.0), SIGMA_FLOOR)


def rolling_median(y: F64, window: int) -> F64:
    if window <= 1 or y.size < window:
        return y.copy()
    h = window // 2
    padded = np.pad(y, h, mode="constant", constant_values=np.nan)  # edges: shorter windows
    return np.nanmedian(np.lib.stride_tricks.sliding_window_view(padded, 2 * h + 1), axis=1)


def winsorise(y: F64, sigma: float, params: DetectorParams) -> F64:
    med = rolling_median(y, params.window)
    lim = params.winsor * sigma
    return np.clip(y, med - lim, med + lim)


def _test(w: F64, lo: int, k: int, hi: int, sigma: float) -> tuple[float, float]:
    left, right = w[lo:k], w[k:hi]
    diff = float(right.mean() - left.mean())
    # the median of n normal values has standard error ~ 1.2533 sigma / sqrt(n)
    se = sigma * math.sqrt(1.0 / left.size + 1.0 / right.size)
    p = float(2.0 * stats.norm.sf(abs(diff) / se))
    return diff, p


def detect_series(y: F64, params: DetectorParams, sigma: float | None = None) -> list[Cut]:
    """Cuts in a log-step-time series ``y`` (time-ordered): the confirmed ones, then a young
    regression the online stage raised among the newest runs, if the search has not confirmed it."""
    s = robust_sigma(y) if sigma is None else sigma
    cuts = confirmed_cuts(y, params, s)
    young = _young(y, params, s, cuts)
    return sorted([*cuts, young], key=lambda c: c.index) if young else cuts


def _young(y: F64, params: DetectorParams, sigma: float, cuts: list[Cut]) -> Cut | None:
    o = params.online
    a = open_alarm(online_alarms(y, o), int(y.size), o)
    if a is None or any(c.index > a.index + params.window
                        or (abs(c.index - a.index) <= params.window and c.change > 0) for c in cuts):
        return None
    lo = max([0, *(c.index for c in cuts if c.index <= a.index - params.min_size)])
    w = winsorise(y, sigma, params)
    if a.index - lo < params.min_size:
        return None
    diff, p2 = _test(w, lo, a.index, int(y.size), sigma)
    p = p2 / 2.0 if diff > 0 else 1.0 - p2 / 2.0      # one-sided: slower
    if p >= o.alpha or math.expm1(diff) < o.min_change:
        return None                                   # the runs since went back: no longer a regression
    return Cut(a.index, math.expm1(diff), p, a.index - lo, int(y.size) - a.index, Stage.YOUNG)


def confirmed_cuts(y: F64, params: DetectorParams, sigma: float | None = None) -> list[Cut]:
    """Confirmed cuts of the change-point search in ``y`` (time-ordered)."""
    n = int(y.size)
    if n < 2 * params.min_size:
        return []
    s = robust_sigma(y) if sigma is None else sigma
    w = winsorise(y, s, params)
    z = ((w - w.mean()) / s).reshape(-1, 1)
    algo = rpt.KernelCPD(kernel="linear", min_size=params.min_size).fit(z)
    cuts = [int(b) for b in algo.predict(pen=params.penalty * math.log(n))[:-1]]
    while cuts:
        bounds = [0, *cuts, n]
        tested = [(*_test(w, bounds[i], bounds[i + 1], bounds[i + 2], s), i) for i in range(len(cuts))]
        failing = [(p, i) for diff, p, i in tested
                   if p >= params.alpha or abs(math.expm1(diff)) < params.min_change]
        if failing:
            cuts.pop(max(failing)[1])
            continue
        blip = _transient(w, bounds, tested, s, params)
        if blip is None:
            return [Cut(cuts[i], math.expm1(diff), p, bounds[i + 1] - bounds[i], bounds[i + 2] - bounds[i + 1])
                    for diff, p, i in tested]
        del cuts[blip:blip + 2]
    return []


def _transient(w: F64, bounds: list[int], tested: list[tuple[float, float, int]], sigma: float,
               params: DetectorParams) -> int | None:
    """Index of the first of two cuts that bracket a short excursion (a few slow runs, then back
    to the same level): an episode, not a lasting change."""
    for j in range(len(tested) - 1):
        (d1, _, i), (d2, _, _) = tested[j], tested[j + 1]
        short = bounds[i + 2] - bounds[i + 1] <= 2 * params.min_size
        if not short or d1 * d2 >= 0:
            continue
        # the levels either side of the excursion agree: compare them directly
        lo, mid_lo, mid_hi, hi = bounds[i], bounds[i + 1], bounds[i + 2], bounds[i + 3]
        outside = np.concatenate([w[lo:mid_lo], w[mid_hi:hi]])
        back, p = _test(outside, 0, mid_lo - lo, outside.size, sigma)
        if p >= params.alpha or abs(math.expm1(back)) < params.min_change:
            return j
    return None


def group_series(runs: Sequence[RunRecord]) -> dict[str, list[RunRecord]]:
    """Runs per signature in time order."""
    out: dict[str, list[RunRecord]] = defaultdict(list)
    for r in sorted(runs, key=lambda r: (r.time, r.run_id)):
        out[r.signature].append(r)
    return dict(out)


def size_normalised(series: Sequence[RunRecord]) -> F64:
    """ln(step time); when one signature runs at several sizes, each size's median is removed so
    that a change of scale is not read as a regression."""
    y = np.fromiter((r.log_cost for r in series), dtype=np.float64, count=len(series))
    sizes = [r.size for r in series]
    if len(set(sizes)) > 1:
        lab = np.array(sizes)
        for z in set(sizes):
            m = lab == z
            y[m] -= float(np.median(y[m]))
    return y


def find_change_points(runs: Sequence[RunRecord], params: DetectorParams | None = None,
                       offsets: Mapping[str, float] | None = None) -> list[ChangePoint]:
    """Change points of every signature with enough runs, most recent first. ``offsets``: run_id →
    ln-step-time taken out before the search (``regress_nodes``: what a run's slow node explains);
    ``before``/``after`` stay the runs' measured step times."""
    p = params or load_params()
    out: list[ChangePoint] = []
    for sig, series in group_series(runs).items():
        y = size_normalised(series)
        if offsets:
            y -= np.fromiter((offsets.get(r.run_id, 0.0) for r in series), dtype=np.float64, count=len(series))
        sigma = robust_sigma(y)
        vals = np.fromiter((r.value for r in series), dtype=np.float64, count=len(series))
        cuts = detect_series(y, p, sigma)
        bounds = [0, *(c.index for c in cuts), len(series)]
        for i, c in enumerate(cuts):
            first = series[c.index]
            out.append(ChangePoint(
                signature=sig, index=c.index, run_id=first.run_id, time=first.time, change=c.change,
                p_value=c.p_value, confidence=1.0 - c.p_value, n_before=c.n_before, n_after=c.n_after,
                before_s=float(np.median(vals[bounds[i]:c.index])),
                after_s=float(np.median(vals[c.index:bounds[i + 2]])), sigma=sigma, stage=c.stage))
    return sorted(out, key=lambda c: (-c.time, c.signature))


def series_noise(runs: Sequence[RunRecord]) -> dict[str, tuple[int, float]]:
    """signature → (runs, robust run-to-run noise as a fraction)."""
    out = {}
    for sig, series in group_series(runs).items():
        y = size_normalised(series)
        out[sig] = (len(series), math.expm1(robust_sigma(y)) if len(series) >= 3 else float("nan"))
    return out

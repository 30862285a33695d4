"""Noise that is not independent from step to step, and the innovations the tests run on.

A rank's peer log-ratio ``r`` is modelled as

    r_t = offset + a_t + e_t,   a_t = phi a_{t-1} + innovation (AR(1): power capping, thermals)

with ``e`` white (per-step jitter, per-node shared noise, Student-t tails) and ``offset`` a
persistent per-GPU difference (the silicon lottery; ``floor.py`` judges it). The job-wide factor
of each step cancels in the peer ratio. A one-sided CUSUM on ``r`` itself assumes independent
steps; under AR(1) with phi 0.9-0.97 a wander of a few percent lasts tens of steps and looks
like a shift to it (its long-run variance is ``(1 + phi) / (1 - phi)`` = 19-66x the AR part's
variance), so thresholds set for independent noise do not hold their budget.

What is done instead (pre-whitening): the steady-state Kalman filter of that model predicts
each rank's next ratio from its own past; the tests run on the **innovations** ``r_t -
prediction``, which are independent under the model, so Siegmund's thresholds hold again. A
slowdown that starts at step t0 shows in full in the innovations at t0 and then fades to
``passes`` of its size (the filter takes part of a lasting shift for wander): large shifts are
found as fast as before, small ones later — the price of wander, paid only when the data shows
wander (with no AR part the innovations are ``r`` itself and nothing changes).

The model and its fit are ``armodel.py``; ``NoiseState`` carries one series' model, filter and
variogram through the job and refits them as it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from minutiae.analyses.stragglers.armodel import ArModel, consistent, fit, fit_rows
from minutiae.analyses.stragglers.calib import (
    NOISE_FLOOR,
    SPIKE_Z,
    noise_sigma,
    sigma_inflation,
    tail_design,
    threshold_for,
)
from minutiae.analyses.stragglers.shift import threshold
from minutiae.analyses.stragglers.types import Design, DetectorDesign
from minutiae.analyses.stragglers.variogram import FIT_COLUMNS, Variogram, columns, unit_columns

#: the state is updated with innovations winsorised at this many noise sigmas (a GC pause or a
#: checkpoint must not move a rank's predicted level)
STATE_CLIP = 4.0


#: rows a zero-state filter needs before its innovations are measured (``refit``)
BURN_IN = 32


def _innovations(z: np.ndarray, *models: ArModel) -> list[tuple[np.ndarray, float]]:
    """Per model: the innovations of ``z`` (steps, ranks; NaN where missing) under it from a
    zero state, less the first ``BURN_IN`` rows, and their robust scale. The models' filters
    run side by side in one pass (each column's arithmetic is its own: the same values as one
    pass per model, at a fraction of the per-step cost)."""
    missing = ~np.isfinite(z)
    filled = np.where(missing, np.float32(0.0), z).astype(np.float32)
    n = z.shape[1]
    wide = [Whitener(m, np.ones(n)) for m in models]
    if any(m.white for m in models) or len(models) == 1:
        nus = [w.innovations(filled, missing if missing.any() else None) for w in wide]
    else:
        both = Whitener.side_by_side(wide).innovations(
            np.tile(filled, len(models)), np.tile(missing, len(models)) if missing.any() else None)
        nus = [both[:, i * n:(i + 1) * n] for i in range(len(models))]
    out = []
    for nu in nus:
        nu[missing] = np.nan
        nu = nu[BURN_IN:] if nu.shape[0] > 2 * BURN_IN else nu
        out.append((nu, noise_sigma(nu)[0]))
    return out


@dataclass(frozen=True, slots=True)
class Refit:
    """What a refit learns: the model, the factor the innovations' scale changes by, and a
    sample of the standardised innovations (their tails set the thresholds:
    ``calib.tail_design``)."""

    model: ArModel
    scale: float
    tail: np.ndarray


def refit(vg: Variogram, rows: np.ndarray, ratio_sigma: np.ndarray, keep: np.ndarray,
          old: ArModel, fallback: ArModel | None = None, within: np.ndarray | None = None,
          ) -> Refit | None:
    """The model of the job's variogram so far, and the factor the innovations' scale changes
    by: both models' innovations of the last ``rows`` (steps, ranks; NaN where missing) of the
    ranks ``keep`` (from a zero state, the first ``BURN_IN`` rows dropped), measured, not
    derived. None when too few ranks are left. ``within``: ``armodel.fit``'s."""
    cols = np.flatnonzero(keep)
    cols = cols[::max(1, cols.size // FIT_COLUMNS)]
    if cols.size < 2:
        return None
    z = rows[:, cols] / ratio_sigma[cols].astype(np.float32)
    model = fit(vg.values(), fallback=fallback, within=within)
    if model.white and old.white:
        model = old
    measured = _innovations(z, model) if model == old else _innovations(z, model, old)
    nu, new_s = measured[0]
    if not (np.isfinite(new_s) and new_s > 0):
        return None
    if model == old:
        return Refit(old, 1.0, (nu / new_s).ravel())
    old_s = measured[1][1]
    if not (np.isfinite(old_s) and old_s > 0):
        return None
    return Refit(model, new_s / old_s, (nu / new_s).ravel())


class Whitener:
    """The steady-state Kalman filter of ``model`` over the ranks' ratios, state carried from
    block to block (a one-step block and a whole file give the same innovations)."""

    def __init__(self, model: ArModel, sigma: np.ndarray) -> None:
        self.model = model
        self.phi: np.float32 | np.ndarray = np.float32(model.phi)
        self.k: np.float32 | np.ndarray = np.float32(model.gain())
        self.level = np.zeros(sigma.size, dtype=np.float32)
        self.clip = (STATE_CLIP * sigma * math.sqrt(max(model.a + model.w, 1e-6))).astype(np.float32)

    @staticmethod
    def side_by_side(parts: list[Whitener]) -> Whitener:
        """One filter over the columns of ``parts`` (non-white), each with its own model's
        coefficients (``model``: the first's; per column, the same float32 arithmetic)."""
        out = Whitener(parts[0].model, np.ones(0))
        sizes = [w.level.size for w in parts]
        out.phi = np.repeat(np.array([w.phi for w in parts], dtype=np.float32), sizes)
        out.k = np.repeat(np.array([w.k for w in parts], dtype=np.float32), sizes)
        out.level = np.concatenate([w.level for w in parts])
        out.clip = np.concatenate([w.clip for w in parts])
        return out

    def innovations(self, r: np.ndarray, missing: np.ndarray | None) -> np.ndarray:
        """``r`` (steps, ranks; missing values 0) minus each rank's prediction; a missing value
        has no innovation and only the prediction moves the state."""
        if self.model.white:
            return r.copy()
        out = np.empty_like(r)
        level, phi, k, hi = self.level, self.phi, self.k, self.clip
        lo = -hi
        upd = np.empty_like(level)
        start = self._idle_rows(missing)
        out[:start] = 0.0
        for t in range(start, r.shape[0]):
            level *= phi
            row = out[t]
            np.subtract(r[t], level, out=row)
            if missing is not None:
                np.copyto(row, np.float32(0.0), where=missing[t])
            np.maximum(row, lo, out=upd)  # np.clip's values, without its Python wrapper
            np.minimum(upd, hi, out=upd)
            upd *= k
            level += upd
        return out

    def _idle_rows(self, missing: np.ndarray | None) -> int:
        """Leading rows missing in every column while the state is all +0: they leave the
        state at +0 and have innovation 0 (a refit's window before the job's first steps)."""
        if missing is None or self.level.any() or np.signbit(self.level).any():
            return 0
        full = missing.all(axis=1)
        return int(full.size if full.all() else np.argmin(full))


def group_sigma(r: np.ndarray, groups: np.ndarray, members: list[np.ndarray],
                floor: float = NOISE_FLOOR) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Per group: the noise of ``r`` (steps, ranks), at least ``floor``, and how many values it
    rests on (a group with fewer than 30 values takes the pooled estimate); and (one-step
    spikes, values) over the whole job for the spike model."""
    pooled, n_all = noise_sigma(r)
    if not np.isfinite(pooled):
        pooled, n_all = floor, 0
    sig = np.empty(len(members))
    count = np.empty(len(members), dtype=np.int64)
    for g, cols in enumerate(members):
        v = r[:, cols]
        s, n = noise_sigma(v) if np.isfinite(v).sum() >= 30 else (pooled, n_all)
        if not np.isfinite(s):
            s, n = pooled, n_all
        sig[g], count[g] = max(s, floor), n
    z = np.abs(r) / sig[groups]
    finite = np.isfinite(z)
    return sig, count, (int((z[finite] > SPIKE_Z).sum()), int(finite.sum()))


def inflate(sig: np.ndarray, count: np.ndarray, d: Design) -> np.ndarray:
    """Each noise estimate times its ``sigma_inflation`` (thresholds hold on average over the
    estimate's error)."""
    return np.array([s * sigma_inflation(int(n), d.detectors) for s, n in zip(sig, count, strict=True)])


@dataclass(frozen=True, slots=True)
class NoiseFit:
    """What calibration learns of one timing series: the ratios' scale per group
    (``ratio_sigma``), the AR model fitted on them, and the innovations' scale per group
    (``sigma``, before inflation), the values it rests on and the spikes seen among them."""

    ratio_sigma: np.ndarray
    model: ArModel
    sigma: np.ndarray
    count: np.ndarray
    spikes: tuple[int, int]
    #: a sample of the innovations (steps, pooled ranks) for their tails, and those ranks
    innovations: np.ndarray
    cols: np.ndarray


def calibrate(r: np.ndarray, groups: np.ndarray, members: list[np.ndarray],
              floor: float = NOISE_FLOOR, fallback: ArModel | None = None) -> NoiseFit:
    """Fit the noise of the warm-up's ratios ``r`` (steps, ranks; NaN where missing): the
    model on the standardised ratios (``fallback`` when they are too few: ``armodel.fit``),
    then the scale of the innovations it leaves (measured, not derived from the model, so a
    model that fits badly still gets honest thresholds)."""
    ratio_sigma, count, spikes = group_sigma(r, groups, members, floor)
    model = fit_rows(r / ratio_sigma[groups], fallback)
    cols = columns(r.shape[1])
    if model.white:
        return NoiseFit(ratio_sigma, model, ratio_sigma, count, spikes, r[:, cols], cols)
    missing = ~np.isfinite(r)
    filled = np.where(missing, np.float32(0.0), r).astype(np.float32)
    nu = Whitener(model, ratio_sigma[groups]).innovations(filled, missing if missing.any() else None)
    nu[missing] = np.nan
    sigma, count, spikes = group_sigma(nu, groups, members, floor)
    return NoiseFit(ratio_sigma, model, sigma, count, spikes, nu[:, cols], cols)


#: the noise model is refitted every this many tested steps, and every ``REFIT_LATER`` once that
#: many were tested (the fit looks at the whole job so far: ``armodel.Variogram``)
REFIT_EVERY, REFIT_LATER = 32, 128


def next_refit(rows: int) -> int:
    """The tested-step count of the first refit after ``rows`` tested steps."""
    if rows < REFIT_LATER:
        return (rows // REFIT_EVERY + 1) * REFIT_EVERY
    return (rows // REFIT_LATER + 1) * REFIT_LATER


def designs(design: Design, tail: np.ndarray | None, model: ArModel) -> list[DetectorDesign]:
    """The tests' designs, thresholds raised for the tails of ``tail`` (``calib.tail_design``).
    With an AR part the level-shift test (``shift.py``) runs on half the slow test's budget,
    so the slow test keeps the other half (its threshold from half its share)."""
    out = list(design.detectors)
    if not model.white:
        slow = out[-1]
        out[-1] = replace(slow, alpha=slow.alpha / 2, h=threshold_for(slow.k, slow.alpha / 4))
    return [d if tail is None else tail_design(d, tail) for d in out]


class NoiseState:
    """One series' noise as the job runs: its model, the filter whose innovations the tests
    see, the variogram it is refitted on, and the tests' designs (thresholds raised for heavy
    tails: ``calib.tail_design``). ``ratio_sigma``: per column, the ratios' scale."""

    def __init__(self, model: ArModel, ratio_sigma: np.ndarray, design: Design,
                 tail: np.ndarray | None, fallback: ArModel | None = None) -> None:
        self.model = model
        self.fallback = fallback
        self.ratio_sigma = ratio_sigma
        self.design = design
        self.whitener = None if model.white else Whitener(model, ratio_sigma)
        self.variogram = Variogram(columns(ratio_sigma.size))
        #: the same of within-node contrasts (``use_units``): the phis it allows bound the fit
        self.contrast: Variogram | None = None
        self.designs = designs(design, tail, model)
        self.rows = 0

    def use_units(self, units: np.ndarray) -> None:
        """Fit the AR coefficient on within-unit contrasts too (``armodel.unit_columns``):
        of the models the ratios are consistent with, only those whose phi the contrasts are
        consistent with are taken (the cautious pick of ``armodel.fit`` among them). Under
        TP-shared noise the ratios' white share hides how fast the wander decays, and the
        cautious pick whitened for phi 0.97-0.99 where it is 0.95 (the level-shift signature
        flattens: a +5 % GPU was found after ~26 steps); the contrasts drop the node's
        shared factor and tell. Wander shared by a node's GPUs (none in the contrasts) would
        make the two disagree: then no phi is in both and the ratios alone decide."""
        picked = unit_columns(units)
        if picked is not None:
            self.contrast = Variogram(*picked)

    @property
    def shift_c(self) -> float:
        """The level-shift test's threshold (``shift.py``) for the current model: half the
        slow test's budget."""
        return threshold(self.design.detectors[-1].alpha / 2.0, self.model)

    def innovations(self, r: np.ndarray, missing: np.ndarray | None) -> np.ndarray:
        return r if self.whitener is None else self.whitener.innovations(r, missing)

    def add(self, r: np.ndarray, missing: np.ndarray | None, gone: np.ndarray | None) -> None:
        self.variogram.add(r, self.ratio_sigma, missing, gone)
        if self.contrast is not None:
            self.contrast.add(r, self.ratio_sigma, missing, gone)

    def until_refit(self) -> int:
        """Tested steps left before the next refit (a block is cut there, so any split of the
        steps into blocks gives the same answer)."""
        return next_refit(self.rows) - self.rows

    def tested(self, n: int) -> bool:
        """Count ``n`` more tested steps; True when a refit is due now."""
        self.rows += n
        return self.rows == next_refit(self.rows - 1)

    def refit(self, recent: np.ndarray, keep: np.ndarray) -> float:
        """Refit on the job so far (``refit``; ``recent``: the last tested ratios, ``keep``: the
        ranks that have not alarmed); the factor the innovations' scale moved by."""
        within = None if self.contrast is None else consistent(self.contrast.values())
        new = refit(self.variogram, recent, self.ratio_sigma, keep, self.model,
                    None if self.fallback is None else self.model, within)
        if new is None:
            return 1.0
        self.designs = designs(self.design, new.tail, new.model)
        if new.model == self.model:
            return 1.0
        level = None if self.whitener is None else self.whitener.level
        self.model = new.model
        self.whitener = None if new.model.white else Whitener(new.model, self.ratio_sigma)
        if self.whitener is not None and level is not None:
            self.whitener.level = level
        return new.scale

    def mean_se(self, cols: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Standard error of the mean ratio of ``n`` consecutive steps of the ranks ``cols``:
        the ratio noise over sqrt(n) when steps are independent, widened by the AR part."""
        return np.asarray(self.ratio_sigma[cols] * np.sqrt(self.model.sum_var(n)) / n)

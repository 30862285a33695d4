"""Fixed-effects regression of normalised run speed on run features (pure numpy/scipy).

Every signature has its own baseline and every day its own fleet-wide level (two-way fixed
effects: values are demeaned by signature and by day), outlier runs are clipped to their signature's median ± 4 robust sigma, and a feature's
effect is the least-squares slope of ln(step time) on the feature net of both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

from minutiae.history.record import RunRecord

DAY = 86400.0
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Effect:
    """Runs with the feature are ``change`` slower (fraction; negative = faster) than runs of the
    same signatures without it. ``p_value``: two-sided t-test of the within-signature slope;
    ``n_with``/``n_without``: runs with/without the feature in signatures where it varies (only
    those inform the estimate); ``se``: standard error of the log-ratio."""

    change: float
    p_value: float
    se: float
    n_with: int
    n_without: int

    def to_json(self) -> dict[str, object]:
        return {"change": round(self.change, 6), "p_value": self.p_value, "se": round(self.se, 6),
                "n_with": self.n_with, "n_without": self.n_without}


@dataclass(frozen=True, slots=True)
class Panel:
    """Runs as arrays: ``y`` = clipped ln(step time), ``g`` = signature index, ``d`` = time-bin
    (day) index, ``t`` = time. Effects are estimated net of both a signature effect and a
    fleet-wide time-bin effect (two-way fixed effects): a rollout is compared with runs at the same
    time on nodes that did not have it yet, so drifts of the whole fleet are not blamed on it."""

    runs: tuple[RunRecord, ...]
    y: F64
    g: I64
    d: I64
    t: F64
    n_groups: int
    n_bins: int
    proj: _Projector
    y_within: F64        # y after the two-way projection (computed once)

    def demean(self, a: F64) -> F64:
        """Residuals of ``a`` (a vector or the columns of a matrix) after signature and time-bin
        effects: the exact two-way fixed-effects projection."""
        out = np.asarray(a, dtype=np.float64)
        if out.ndim == 1:
            return self.proj.residual(out[:, None])[:, 0]
        return self.proj.residual(out)


class _Projector:
    """Exact two-way within transform. With G (signature) and D (time-bin) one-hot matrices:
    r = M_G (Y − D b), b = (Dᵀ M_G D)⁺ Dᵀ M_G Y, M_G Z = Z − G (GᵀG)⁻¹ Gᵀ Z. Only an
    (n_bins × n_bins) matrix is inverted, so thousands of signatures cost nothing extra."""

    def __init__(self, g: I64, d: I64, n_groups: int, n_bins: int) -> None:
        from scipy import sparse

        n = g.size
        ones = np.ones(n)
        self.gm = sparse.csr_matrix((ones, (np.arange(n), g)), shape=(n, n_groups))
        self.dm = sparse.csr_matrix((ones, (np.arange(n), d)), shape=(n, n_bins))
        self.cg = np.maximum(np.bincount(g, minlength=n_groups).astype(float), 1.0)
        cd = np.bincount(d, minlength=n_bins).astype(float)
        self.dtg = (self.dm.T @ self.gm).tocsr()                      # n_bins × n_groups
        k = np.diag(cd) - (self.dtg @ sparse.diags(1.0 / self.cg) @ self.dtg.T).toarray()
        self.kinv = np.linalg.pinv(k) if n_bins else np.zeros((0, 0))

    def _mg(self, z: F64) -> F64:
        return np.asarray(z - self.gm @ ((self.gm.T @ z) / self.cg[:, None]))

    def residual(self, y: F64) -> F64:
        gty = self.gm.T @ y
        dtmgy = self.dm.T @ y - self.dtg @ (gty / self.cg[:, None])
        b = self.kinv @ dtmgy
        return self._mg(y - self.dm @ b)


def make_panel(runs: Sequence[RunRecord], bin_s: float = DAY) -> Panel:
    ordered = tuple(sorted(runs, key=lambda r: (r.time, r.run_id)))
    # one baseline per (signature, size): a signature run at several world sizes has one per size
    sigs = {s: i for i, s in enumerate(sorted({(r.signature, r.size) for r in ordered}))}
    g = np.fromiter((sigs[(r.signature, r.size)] for r in ordered), dtype=np.int64, count=len(ordered))
    y = np.fromiter((r.log_cost for r in ordered), dtype=np.float64, count=len(ordered))
    t = np.fromiter((r.time for r in ordered), dtype=np.float64, count=len(ordered))
    d_raw = np.floor((t - (t.min() if t.size else 0.0)) / bin_s).astype(np.int64)
    _, d = np.unique(d_raw, return_inverse=True)
    # clip outlier runs per signature (median ± 4 × 1.4826 MAD)
    for k in range(len(sigs)):
        m = g == k
        if m.sum() >= 3:
            med = float(np.median(y[m]))
            mad = 1.4826 * float(np.median(np.abs(y[m] - med))) or 1e-4
            y[m] = np.clip(y[m], med - 4 * mad, med + 4 * mad)
    d64 = d.astype(np.int64)
    n_bins = int(d.max(initial=-1)) + 1
    proj = _Projector(g, d64, len(sigs), n_bins)
    return Panel(ordered, y, g, d64, t, len(sigs), n_bins, proj, proj.residual(y[:, None])[:, 0])


def informative(panel: Panel, x: F64) -> npt.NDArray[np.bool_]:
    """Runs whose signature has the feature both on and off (the only ones that inform it)."""
    counts = np.bincount(panel.g, minlength=panel.n_groups)
    on = np.bincount(panel.g, weights=x, minlength=panel.n_groups)
    varies = (on > 0) & (on < counts)
    return varies[panel.g]


def fe_effect(panel: Panel, x: F64) -> Effect | None:
    """Within-signature effect of feature ``x`` (0/1 or a share); None when it never varies
    within a signature (nothing can be said)."""
    keep = informative(panel, x)
    if keep.sum() < 3:
        return None
    yt, xt = panel.y_within, panel.demean(x)
    sxx = float(xt @ xt)
    if sxx <= 1e-9:
        return None
    beta = float(xt @ yt) / sxx
    dof = max(int(yt.size) - panel.n_groups - panel.n_bins - 1, 1)
    resid = yt - beta * xt
    se = math.sqrt(max(float(resid @ resid) / dof, 1e-12) / sxx)
    p = float(2.0 * stats.t.sf(abs(beta) / se, dof))
    n_with = int((x[keep] > 0).sum())
    return Effect(math.expm1(beta), p, se, n_with, int(keep.sum()) - n_with)


def fe_joint(panel: Panel, xs: F64) -> list[Effect | None]:
    """Joint within-signature least squares of several features (columns of ``xs``): each effect is
    net of the others (a driver rollout that came with new nodes is not blamed on the nodes)."""
    k = xs.shape[1]
    if k == 0:
        return []
    yt, xt = panel.y_within, panel.demean(xs)
    ok = np.array([float(xt[:, j] @ xt[:, j]) > 1e-12 for j in range(k)])
    out: list[Effect | None] = [None] * k
    if not ok.any():
        return out
    a = xt[:, ok]
    xtx_inv = np.linalg.pinv(a.T @ a)         # normal equations: k is small, n may be 10^5
    beta = xtx_inv @ (a.T @ yt)
    resid = yt - a @ beta
    dof = max(yt.size - panel.n_groups - panel.n_bins - int(ok.sum()), 1)
    s2 = max(float(resid @ resid) / dof, 1e-12)
    cov = s2 * xtx_inv
    for col, j in enumerate(np.flatnonzero(ok)):
        se = math.sqrt(max(float(cov[col, col]), 1e-18))
        p = float(2.0 * stats.t.sf(abs(beta[col]) / se, dof))
        keep = informative(panel, xs[:, j])
        n_with = int((xs[keep, j] > 0).sum())
        out[j] = Effect(math.expm1(float(beta[col])), p, se, n_with, int(keep.sum()) - n_with)
    return out


@dataclass(frozen=True, slots=True)
class Membership:
    """(run, node) pairs of the panel as flat arrays (rollout exposure, bad-node cells), the
    node index of each name, and the number of nodes of each run."""

    run: np.ndarray
    node: np.ndarray
    names: dict[str, int]
    per_run: np.ndarray


def membership(panel: Panel) -> Membership:
    names: dict[str, int] = {}
    runs, nodes = [], []
    for j, r in enumerate(panel.runs):
        for nd in r.nodes:
            runs.append(j)
            nodes.append(names.setdefault(nd, len(names)))
    run = np.array(runs, dtype=np.int64)
    return Membership(run, np.array(nodes, dtype=np.int64), names,
                      np.bincount(run, minlength=len(panel.runs)))

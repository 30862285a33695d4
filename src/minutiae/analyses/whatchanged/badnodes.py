"""Bad nodes, found net of the rollouts, left out of the fleet-wide rollout fits (pure).

A node that degrades (or is flaky) slows every run that draws it. With jobs on contiguous
nodes and rollouts that go out rack by rack, a bad node's rack meets a rollout together, so a
null rollout takes part of the node's penalty (``bench/regress/indep.py``: 5 of its 7 false
causes were fleet-wide -1.3..+0.7 % on null rollouts; P 0.983 with the bad nodes switched off).
The slow-node penalty of ``analyses.regress.nodes`` cannot be netted out instead: it is fitted
*without* the rollouts, so a rollout on some racks reads as slow nodes there and is taken out
with them (recall fell, docs/regress.md).

Here node effects are fitted *jointly with* the rollout exposures: ln(step time) net of the
signature and day levels (the two-way projection of ``stats.Panel``) and of every rollout column
(unpenalised: a rollout's common effect on all its nodes is explained by its own column, which
costs nothing, rather than by dozens of shrunk node effects) ≈ Σ over the run's nodes of that
node's effect in that week, by damped least squares (``scipy.sparse.linalg.lsqr``: a node-week
with few runs is shrunk toward "not slow"). A node-week is bad when its effect exceeds
``z``·σ/√m (m runs) and ``min_effect``. The runs that drew one are *left out* of the fleet-wide
fits (``runs_kept``), not netted out by a fitted column: a column also takes their variance
out, every standard error shrinks, and the small biases that remain pass the 0.5 % floor more
often (tried: docs/regress.md, "Bad nodes").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import LinearOperator, lsqr

from minutiae.analyses.regress.detect import robust_sigma
from minutiae.analyses.whatchanged.stats import DAY, F64, Panel, make_panel, membership


@dataclass(frozen=True, slots=True)
class BadNodeParams:
    """``days``: length of a node's period; ``damp``: ridge damping in units of the noise (1: a
    node-week with m runs keeps m/(m+1) of its effect); ``z``, ``min_effect``: a node-week is bad
    above ``z``·σ/√m and ``min_effect`` (fraction); ``min_runs``: fewer runs are never bad;
    ``max_nodes``: at most this many bad nodes (worst first) become columns."""

    days: float = 7.0
    damp: float = 1.0
    z: float = 3.0
    min_effect: float = 0.01
    min_runs: int = 4


BAD_NODES = BadNodeParams()


def _incidence(panel: Panel, days: float) -> tuple[sparse.csr_matrix, np.ndarray, np.ndarray]:
    """Run × (node, period) incidence, the node of each cell, and the runs per cell."""
    mem = membership(panel)
    run, node = mem.run, mem.node
    period = np.floor((panel.t - panel.t.min()) / (days * DAY)).astype(np.int64)
    n_per = int(period.max()) + 1
    cells, cell = np.unique(node * n_per + period[run], return_inverse=True)
    z = sparse.csr_matrix((np.ones(run.size), (run, cell)), shape=(len(panel.runs), cells.size))
    return z, cells // n_per, np.bincount(cell, minlength=cells.size).astype(np.float64)


def _projector(panel: Panel, xcols: F64) -> tuple[F64, F64]:
    """(orthonormal basis of the rollout columns after the two-way projection, y net of both)."""
    xd = panel.demean(xcols) if xcols.size else np.zeros((len(panel.runs), 0))
    if xd.shape[1]:
        u, s, _ = np.linalg.svd(xd, full_matrices=False)
        q = u[:, s > 1e-8 * max(float(s.max(initial=0.0)), 1e-300)]
    else:
        q = xd
    y = panel.y_within - q @ (q.T @ panel.y_within)
    return q, y


def _bad_cells(panel: Panel, xcols: F64, p: BadNodeParams,
               ) -> tuple[sparse.csr_matrix, np.ndarray, F64, np.ndarray] | None:
    """(incidence, node of each cell, effect of each cell, bad cells); None without node names."""
    n = len(panel.runs)
    if n < 3 or not any(r.nodes for r in panel.runs):
        return None
    z, node_of, m_cell = _incidence(panel, p.days)
    q, y = _projector(panel, xcols)
    sigma = robust_sigma(y)
    if not math.isfinite(sigma) or sigma <= 0:
        return None

    def proj(v: F64) -> F64:
        r = panel.demean(v)
        return r - q @ (q.T @ r)

    op = LinearOperator((n, z.shape[1]), matvec=lambda u: proj(z @ u),
                        rmatvec=lambda v: z.T @ proj(v), dtype=np.float64)
    beta = lsqr(op, y / sigma, damp=p.damp, atol=1e-6, btol=1e-6, iter_lim=300)[0] * sigma
    floor = np.maximum(p.z * sigma / np.sqrt(np.maximum(m_cell, 1.0)), math.log1p(p.min_effect))
    return z, node_of, beta, (m_cell >= p.min_runs) & (beta > floor)


def bad_node_runs(panel: Panel, xcols: F64, p: BadNodeParams = BAD_NODES) -> np.ndarray:
    """Runs that drew a bad node in one of its bad weeks (bool per run)."""
    cells = _bad_cells(panel, xcols, p)
    if cells is None:
        return np.zeros(len(panel.runs), dtype=bool)
    z, _, _, bad = cells
    return np.asarray(z @ bad.astype(np.float64)).ravel() > 0


def runs_kept(panel: Panel, cols: list[np.ndarray], p: BadNodeParams | None,
              ) -> tuple[np.ndarray, Panel]:
    """(runs kept, their panel) for the fleet-wide fits of rollout attribution: every run but
    those that drew a bad node in one of its bad weeks (``cols``: the rollout exposures the
    nodes are fitted net of; ``p`` None: every run)."""
    keep = np.ones(len(panel.runs), dtype=bool)
    if p is None:
        return keep, panel
    bad = bad_node_runs(panel, np.column_stack(cols), p)
    if not bad.any() or bad.all():
        return keep, panel
    return ~bad, make_panel([r for r, b in zip(panel.runs, bad, strict=True) if not b])


__all__ = ["BAD_NODES", "BadNodeParams", "bad_node_runs", "runs_kept"]

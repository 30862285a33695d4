"""Node-level test: the median of a node's ranks' peer log-ratios, per step.

A slow node (cooling, power capping, a bad board, a noisy neighbour) slows all its GPUs a
little; each rank alone needs many steps to show 5-10 % through 2-3 % noise, but the median of
its 8 ranks has about a third of the noise, so the node is found several times sooner. The
median (not the mean) makes the test blind to one slow GPU: that needs at least half of the
node's ranks to move, so a single-GPU fault is never promoted to a node fault.
"""

from __future__ import annotations

import numpy as np

from minutiae.analyses.stragglers.medians import fast_median


class NodeLayout:
    """Ranks grouped by node, when every node runs the same number (>= 2) of the job's ranks."""

    def __init__(self, names: list[str], order: np.ndarray, per_node: int) -> None:
        self.names = names
        self.order = order
        self.per_node = per_node
        self.identity = bool(np.array_equal(order, np.arange(order.size)))
        self.members = [order[i * per_node:(i + 1) * per_node] for i in range(len(names))]

    @staticmethod
    def of(node: tuple[str | None, ...]) -> NodeLayout | None:
        if not node or any(n is None for n in node):
            return None
        names, inverse, counts = np.unique(np.array(node, dtype=object).astype(str),
                                           return_inverse=True, return_counts=True)
        if counts.min() != counts.max() or counts[0] < 2 or names.size < 2:
            return None
        order = np.argsort(inverse, kind="stable")
        return NodeLayout([str(n) for n in names], order, int(counts[0]))

    def medians(self, r: np.ndarray) -> np.ndarray:
        """(steps, nodes) median of each node's ranks' log-ratios (NaN-aware)."""
        x = r if self.identity else r[:, self.order]
        x = x.reshape(r.shape[0], len(self.names), self.per_node)
        return fast_median(x, axis=2).astype(np.float32)

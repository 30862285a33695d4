"""Choosing a scheduler backend for ``minutiae serve`` (imports the concrete one lazily)."""

from __future__ import annotations

from collections.abc import Sequence

from minutiae.clock import Clock
from minutiae.errors import BackendError, ConfigError
from minutiae.schedulers.base import NodeSchedState, NodeState, SchedulerBackend, validate_node

BACKENDS = ("dry-run", "slurm", "kubernetes")


class DryRunBackend:
    """No scheduler at all: every node is available and nothing is ever changed. The
    controller's dry-run overlay shows what it would have done."""

    name = "dry-run"

    def state(self, node: str) -> NodeState:
        return NodeState(validate_node(node), NodeSchedState.AVAILABLE)

    def states(self, nodes: Sequence[str]) -> dict[str, NodeState]:
        """Bulk ``state`` (the controller reads every node's state once per TTL)."""
        return {n: NodeState(validate_node(n), NodeSchedState.AVAILABLE) for n in nodes}

    def drain(self, node: str, reason: str) -> None:
        raise BackendError("dry-run backend: refusing to drain (no scheduler configured)")

    def resume(self, node: str) -> None:
        raise BackendError("dry-run backend: refusing to resume (no scheduler configured)")

    def annotate(self, node: str, key: str, value: str) -> None:
        raise BackendError("dry-run backend: refusing to annotate (no scheduler configured)")


def make_backend(name: str, clock: Clock, *, slurm_conf: str | None = None,
                 kubeconfig: str | None = None) -> SchedulerBackend:
    if name == "dry-run":
        return DryRunBackend()
    if name == "slurm":
        import importlib

        slurm = importlib.import_module("minutiae.schedulers.slurm.backend")
        be: SchedulerBackend = slurm.SlurmBackend(slurm_conf=slurm_conf)
        return be
    if name == "kubernetes":
        import os

        from minutiae.schedulers.kubernetes.backend import KubernetesBackend

        # MINUTIAE_K8S_EVICT=1: also evict a drained node's pods (PodDisruptionBudgets honoured)
        evict = os.environ.get("MINUTIAE_K8S_EVICT") == "1"
        if kubeconfig:
            return KubernetesBackend.from_kubeconfig(kubeconfig, clock, evict=evict)
        return KubernetesBackend.in_cluster(clock, evict=evict)
    raise ConfigError(f"--backend: unknown backend {name!r} (one of: {', '.join(BACKENDS)})")

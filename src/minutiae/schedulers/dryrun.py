"""The dry-run backend: no scheduler at all. Every node is available and nothing is ever
changed; the controller's dry-run overlay shows what it would have done."""

from __future__ import annotations

from collections.abc import Sequence

from minutiae.errors import BackendError
from minutiae.schedulers.base import (
    NOTHING_TO_UNDO,
    BackendOptions,
    NodeSchedState,
    NodeState,
    UndoVerb,
    validate_node,
)


class DryRunBackend:
    """No scheduler: every node available, every change refused."""

    name = "dry-run"

    @classmethod
    def create(cls, opts: BackendOptions) -> DryRunBackend:
        return cls()

    @staticmethod
    def undo_hint(verb: UndoVerb, node: str, reason: str = "") -> str:
        return NOTHING_TO_UNDO

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

"""A recording fake of ``SchedulerBackend`` (httpx-transport style): keeps node states in memory
and records every call, so policy/controller tests assert on what would have been done.
The contract suite (tests/schedulers/test_backends_contract.py) runs the same checks against real
Slurm and Kubernetes. Registered as ``recording`` (not offered by ``minutiae serve``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from minutiae.errors import BackendError, BackendUnavailable
from minutiae.schedulers.base import (
    DEFAULT_OWNER,
    NOTHING_TO_UNDO,
    BackendOptions,
    NodeSchedState,
    NodeState,
    UndoVerb,
    make_reason,
    owns,
    reason_owner,
    validate_node,
)


@dataclass
class Call:
    op: str
    node: str
    arg: str | None = None


@dataclass
class RecordingBackend:
    """In-memory scheduler. ``admin_drain`` simulates a drain made by a person or another tool."""

    name: str = "recording"
    nodes: dict[str, NodeState] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    annotations: dict[tuple[str, str], str] = field(default_factory=dict)
    unreachable: bool = False
    #: whose drains these are (``schedulers.base.owns`` decides what it may resume)
    owner: str = DEFAULT_OWNER

    @classmethod
    def create(cls, opts: BackendOptions) -> RecordingBackend:
        return cls(owner=opts.owner or DEFAULT_OWNER)

    @staticmethod
    def undo_hint(verb: UndoVerb, node: str, reason: str = "") -> str:
        return NOTHING_TO_UNDO  # no real scheduler was touched

    def add_node(self, node: str, jobs: tuple[str, ...] = ()) -> None:
        self.nodes[validate_node(node)] = NodeState(node, NodeSchedState.AVAILABLE, jobs=jobs)

    def admin_drain(self, node: str, reason: str) -> None:
        """A drain by someone else: a person, another tool, or the other minutiae path (a
        ``minutiae[hcp]: …`` reason: it then shows that owner)."""
        tag = reason_owner(reason)
        self.nodes[node] = NodeState(node, NodeSchedState.DRAINED, reason=reason,
                                     ours=owns(self.owner, tag), owner=tag)

    def _get(self, node: str) -> NodeState:
        if self.unreachable:
            raise BackendUnavailable(f"{self.name}: scheduler unreachable")
        validate_node(node)
        if node not in self.nodes:
            raise BackendError(f"{self.name}: unknown node {node}")
        return self.nodes[node]

    def state(self, node: str) -> NodeState:
        return self._get(node)

    def all_states(self) -> dict[str, NodeState]:
        """Every node this scheduler knows (the controller counts those never reporting)."""
        if self.unreachable:
            raise BackendUnavailable(f"{self.name}: scheduler unreachable")
        return dict(self.nodes)

    def drain(self, node: str, reason: str) -> None:
        cur = self._get(node)
        self.calls.append(Call("drain", node, reason))
        if cur.state in (NodeSchedState.DRAINED, NodeSchedState.DRAINING) and not cur.ours:
            return  # someone else's drain: leave their reason alone
        self.nodes[node] = NodeState(node, NodeSchedState.DRAINED,
                                     reason=make_reason(reason, self.owner), ours=True,
                                     jobs=cur.jobs, owner=self.owner)

    def resume(self, node: str) -> None:
        cur = self._get(node)
        if cur.state is NodeSchedState.AVAILABLE:
            return
        if not cur.ours or not owns(self.owner, reason_owner(cur.reason)):
            raise BackendError(f"{self.name}: refusing to resume {node}: drain is not ours ({cur.reason!r})")
        self.calls.append(Call("resume", node))
        self.nodes[node] = NodeState(node, NodeSchedState.AVAILABLE, jobs=cur.jobs)

    def annotate(self, node: str, key: str, value: str) -> None:
        self._get(node)
        self.calls.append(Call("annotate", node, f"{key}={value}"))
        self.annotations[(node, key)] = value

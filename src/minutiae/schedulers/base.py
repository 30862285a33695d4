"""The scheduler-neutral seam: every backend (Slurm, Kubernetes, dry-run, recording fake)
implements ``SchedulerBackend``. Policy and controller code never import a concrete backend:
they get one from ``minutiae.schedulers.make_backend`` (the registry) and use the optional
capabilities below only through :class:`Capabilities`, found once when the backend is made.

The contract (the one place it is written; ``tests/schedulers/test_backends_contract.py`` runs
it against every registered backend, real Slurm and a real kube-apiserver included):

- ``state(node)`` says what the scheduler says about ``node`` now. ``ours`` is true only for a
  drain/cordon minutiae made (reason starts with ``minutiae:``, or our annotation is set).
- ``drain(node, reason)`` takes the node out of scheduling with ``reason`` (already made by
  :func:`make_reason`). Idempotent: draining a node drained by us changes nothing; a node
  drained or down by someone else is left as it is, their reason untouched.
- ``resume(node)`` returns a node *we* drained to service; idempotent on an available node;
  raises ``BackendError`` ("refusing to resume …") for a drain that is not ours.
- ``annotate(node, key, value)`` records ``key=value`` on the node where the scheduler can.
- Node names pass :func:`validate_node` before any command or API path is built.
- Errors: ``BackendUnavailable`` when the scheduler cannot be reached (the controller does not
  act that step), ``BackendError`` for anything else; never a bare exception.
- Optional capabilities are declared in the registry line and must hold on the instance
  (``make_backend`` checks): ``BulkStates.states(nodes)`` (one call for many nodes; a node the
  scheduler does not know is left out), ``ListsNodes.all_states()`` (every node it knows),
  ``JobTolerances.job_tolerances()`` (job id → nodes it may lose, from the jobs' metadata).
- The class gives ``create(opts)`` (build from :class:`BackendOptions`) and
  ``undo_hint(verb, node, reason)``: the exact command, in the scheduler's own tools, that
  reverses a ``drain`` or a ``resume`` (shown in audit rows, ``explain`` and notifications).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Literal, Protocol, runtime_checkable

from minutiae.clock import Clock
from minutiae.errors import ValidationError

#: Prefix of every reason minutiae writes; a drain whose reason lacks it is not ours.
REASON_PREFIX = "minutiae:"
MAX_REASON_LEN = 200
_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_REASON_BAD = re.compile(r"[\x00-\x1f\x7f`$;|&<>\\\"']")


class NodeSchedState(Enum):
    """What the scheduler says about a node, reduced to what policy needs."""

    AVAILABLE = "available"
    DRAINING = "draining"
    DRAINED = "drained"
    DOWN = "down"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as the scheduler sees it. ``ours`` is true only when the drain/cordon was made by
    minutiae (reason starts with ``minutiae:`` or our annotation is present)."""

    node: str
    state: NodeSchedState
    reason: str | None = None
    ours: bool = False
    jobs: tuple[str, ...] = ()


def validate_node(name: str) -> str:
    """Reject node names that could inject into a command line or an API path."""
    if not isinstance(name, str) or not _NODE_RE.fullmatch(name):
        raise ValidationError(f"invalid node name {name!r}")
    return name


def make_reason(text: str) -> str:
    """A scheduler reason: ``minutiae: <text>``, printable, no shell metacharacters, length-capped."""
    body = text.strip()
    if body.startswith(REASON_PREFIX):
        body = body[len(REASON_PREFIX):].strip()
    body = _REASON_BAD.sub(" ", body)
    body = re.sub(r"\s+", " ", body).strip()
    if not body:
        raise ValidationError("empty reason")
    reason = f"{REASON_PREFIX} {body}"
    if len(reason) > MAX_REASON_LEN:
        reason = reason[: MAX_REASON_LEN - 1] + "…"
    return reason


#: The verbs an undo hint reverses (the controller's HOLD/ESCALATE touch no scheduler).
UndoVerb = Literal["drain", "resume"]
#: What there is to undo when no scheduler was touched (dry-run, a fake, an unknown name).
NOTHING_TO_UNDO = "nothing to undo: dry-run, the scheduler was not touched"


class SchedulerBackend(Protocol):
    """Drain/resume/annotate/state; see the module docstring for the contract."""

    name: str

    def state(self, node: str) -> NodeState: ...

    def drain(self, node: str, reason: str) -> None:
        """Take the node out of scheduling with ``reason`` (already made by ``make_reason``)."""
        ...

    def resume(self, node: str) -> None:
        """Return a node *we* drained to service; must refuse a drain that is not ours."""
        ...

    def annotate(self, node: str, key: str, value: str) -> None: ...


# -- optional capabilities: declared in the registry, checked when the backend is made ------

@runtime_checkable
class BulkStates(Protocol):
    def states(self, nodes: Sequence[str]) -> dict[str, NodeState]:
        """States of ``nodes`` in one call; nodes the scheduler does not know are left out."""
        ...


@runtime_checkable
class ListsNodes(Protocol):
    def all_states(self) -> dict[str, NodeState]:
        """Every node the scheduler knows (the controller counts those never reporting)."""
        ...


@runtime_checkable
class JobTolerances(Protocol):
    def job_tolerances(self) -> dict[str, int]:
        """Job id → how many nodes the job survives losing, from the jobs' own metadata."""
        ...


#: Every optional capability, in the order they are reported.
CAPABILITIES: tuple[type, ...] = (BulkStates, ListsNodes, JobTolerances)


def capabilities_of(backend: object) -> frozenset[type]:
    """The optional capabilities ``backend`` has (what the contract suite compares with the
    registry's declaration)."""
    return frozenset(c for c in CAPABILITIES if isinstance(backend, c))


@dataclass(frozen=True, slots=True)
class Capabilities:
    """A backend's optional capabilities, found once (``Capabilities.of(backend)``); a field is
    None where the backend does not have it."""

    bulk: BulkStates | None = None
    listing: ListsNodes | None = None
    tolerances: JobTolerances | None = None

    @staticmethod
    def of(backend: object) -> Capabilities:
        return Capabilities(
            bulk=backend if isinstance(backend, BulkStates) else None,
            listing=backend if isinstance(backend, ListsNodes) else None,
            tolerances=backend if isinstance(backend, JobTolerances) else None)


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What ``make_backend(name, **opts)`` may pass a backend's ``create``; each backend
    reads the options it needs. ``evict``: Kubernetes also evicts a drained node's pods."""

    clock: Clock | None = None
    slurm_conf: str | None = None
    kubeconfig: str | None = None
    evict: bool = False


class BackendClass(Protocol):
    """What the registry needs from a backend's class."""

    def create(self, opts: BackendOptions) -> SchedulerBackend: ...

    def undo_hint(self, verb: UndoVerb, node: str, reason: str = "") -> str: ...

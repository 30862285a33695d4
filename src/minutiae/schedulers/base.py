"""The scheduler-neutral seam: every backend (Slurm, Kubernetes, dry-run, recording fake)
implements ``SchedulerBackend``. Policy and controller code never import a concrete backend:
they get one from ``minutiae.schedulers.make_backend`` (the registry) and use the optional
capabilities below only through :class:`Capabilities`, found once when the backend is made.

The contract (the one place it is written; ``tests/schedulers/test_backends_contract.py`` runs
it against every registered backend, real Slurm and a real kube-apiserver included):

- ``state(node)`` says what the scheduler says about ``node`` now. ``owner`` is the minutiae
  owner tag of a drain/cordon minutiae made (``minutiae[<owner>]:`` reason prefix, or the
  ownership annotation; ``legacy`` for the plain ``minutiae:`` prefix of older versions);
  ``ours`` is true only when that owner is this backend's own (:func:`owns`).
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

#: Prefix of every reason minutiae wrote before owner tags (still read: ``LEGACY_OWNER``).
REASON_PREFIX = "minutiae:"
#: The HealthCheckProgram's owner tag (``minutiae check --slurm``): ``minutiae[hcp]: …``.
HCP_OWNER = "hcp"
#: The owner of a plain ``minutiae:`` drain (an older version; see :func:`owns`).
LEGACY_OWNER = "legacy"
#: A controller's owner tag when none is configured (``<cluster>/<controller>``).
DEFAULT_OWNER = "default/controller"
_OWNER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,40}(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,40})?$")
_TAGGED = re.compile(r"^minutiae\[([^\]\s]{1,83})\]:")
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
    """A node as the scheduler sees it. ``owner``: which minutiae path made the drain/cordon
    (``hcp``, ``<cluster>/<controller>``, ``legacy``), None when no minutiae path did;
    ``ours`` is true only when it is the asking backend's own owner."""

    node: str
    state: NodeSchedState
    reason: str | None = None
    ours: bool = False
    jobs: tuple[str, ...] = ()
    #: the minutiae owner tag of the drain (None: not drained by minutiae)
    owner: str | None = None


def validate_node(name: str) -> str:
    """Reject node names that could inject into a command line or an API path."""
    if not isinstance(name, str) or not _NODE_RE.fullmatch(name):
        raise ValidationError(f"invalid node name {name!r}")
    return name


def validate_owner(owner: str) -> str:
    """An owner tag: ``hcp`` or ``<cluster>/<controller>`` (letters, digits, ``._-``)."""
    if not isinstance(owner, str) or not _OWNER_RE.fullmatch(owner) or owner == LEGACY_OWNER:
        raise ValidationError(f"invalid owner {owner!r} (want <cluster>/<controller>, letters, "
                              "digits and ._- only)")
    return owner


def controller_owner(cluster: str, controller: str) -> str:
    """A controller's owner tag ``<cluster>/<controller>`` (``hcp`` is the HCP's, not one)."""
    owner = validate_owner(f"{cluster}/{controller}")
    if "/" not in owner:
        raise ValidationError(f"invalid controller identity {owner!r}")
    return owner


def reason_owner(reason: str | None) -> str | None:
    """Who a scheduler reason says drained the node: the tag of ``minutiae[<tag>]:``,
    ``legacy`` for a plain ``minutiae:`` (an older version), None for anyone else."""
    text = (reason or "").strip()
    m = _TAGGED.match(text)
    if m:
        return m.group(1)
    return LEGACY_OWNER if text.startswith(REASON_PREFIX) else None


def owns(owner: str, tag: str | None) -> bool:
    """May the path ``owner`` resume a drain tagged ``tag``? Only its own. A ``legacy`` drain
    (plain ``minutiae:``: both paths wrote it before owner tags) is adopted by a controller —
    which then resumes it only when its own memory says it made that drain — and never by the
    HealthCheckProgram."""
    return tag is not None and (tag == owner or (tag == LEGACY_OWNER and owner != HCP_OWNER))


def make_reason(text: str, owner: str | None = None) -> str:
    """A scheduler reason: ``minutiae[<owner>]: <text>`` (``minutiae: <text>`` without an
    owner), printable, no shell metacharacters, length-capped. A minutiae prefix already on
    ``text`` (tagged or not) is replaced."""
    body = text.strip()
    m = _TAGGED.match(body)
    if m:
        body = body[m.end():].strip()
    elif body.startswith(REASON_PREFIX):
        body = body[len(REASON_PREFIX):].strip()
    body = _REASON_BAD.sub(" ", body)
    body = re.sub(r"\s+", " ", body).strip()
    if not body:
        raise ValidationError("empty reason")
    prefix = REASON_PREFIX if owner is None else f"minutiae[{validate_owner(owner)}]:"
    reason = f"{prefix} {body}"
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
    reads the options it needs. ``owner`` tags its drains; ``evict``: Kubernetes also evicts a drained node's pods."""

    clock: Clock | None = None
    slurm_conf: str | None = None
    kubeconfig: str | None = None
    evict: bool = False
    #: whose drains these are (``<cluster>/<controller>`` or ``hcp``); None: ``DEFAULT_OWNER``
    owner: str | None = None


class BackendClass(Protocol):
    """What the registry needs from a backend's class."""

    def create(self, opts: BackendOptions) -> SchedulerBackend: ...

    def undo_hint(self, verb: UndoVerb, node: str, reason: str = "") -> str: ...

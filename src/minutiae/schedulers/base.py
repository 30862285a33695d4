"""The scheduler-neutral seam: every backend (Slurm, Kubernetes, dry-run, recording fake)
implements ``SchedulerBackend``. Policy and controller code never import a concrete backend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

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


class SchedulerBackend(Protocol):
    """Drain/resume/annotate/state; implementations must be idempotent."""

    name: str

    def state(self, node: str) -> NodeState: ...

    def drain(self, node: str, reason: str) -> None:
        """Take the node out of scheduling with ``reason`` (already made by ``make_reason``)."""
        ...

    def resume(self, node: str) -> None:
        """Return a node *we* drained to service; must refuse a drain that is not ours."""
        ...

    def annotate(self, node: str, key: str, value: str) -> None: ...

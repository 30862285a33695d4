"""Records the reconcile step reads and writes (pure data; no I/O).

``FleetState`` (input) = each node's latest agent report + what the scheduler says + failure
domains, and ``ControllerMemory`` (what the controller remembers between steps: remediation
rung, healthy-since, drain history for lemons, token buckets, pause/breaker).
``Plan`` (output) = the decisions plus the next memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from minutiae.controller.budget import Bucket, BudgetVerdict
from minutiae.model import Action, Finding, Status
from minutiae.schedulers import NOTHING_TO_UNDO, undo_hint
from minutiae.schedulers.base import DEFAULT_OWNER, NodeSchedState, NodeState


class Verb(Enum):
    """What a decision does: ``drain`` takes a node out of service, ``resume`` returns one we
    drained, ``escalate`` asks for the next remediation rung (reset GPU → reboot → inspect),
    ``hold`` means we wanted to act but the budget, the pause switch or the breaker said no."""

    DRAIN = "drain"
    RESUME = "resume"
    ESCALATE = "escalate"
    HOLD = "hold"
    #: a human returned the node to service (``minutiae resolve``, or an admin's own resume of
    #: our drain): its current findings are acknowledged; touches no scheduler
    RESOLVE = "resolve"


class Health(Enum):
    """A node's health as the policy reads its latest report. UNKNOWN (no report, stale report,
    or checks that could not run) is never treated as healthy."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Report:
    """A node's latest verdict as the agent sent it. ``unknown`` lists checks that could not
    run, with their reasons."""

    node: str
    time: float
    status: Status
    findings: tuple[Finding, ...] = ()
    unknown: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node: its report (None: never reported), its scheduler state (None: the scheduler
    could not tell us) and its failure domains (``rack``, ``leaf``, ``nvl_domain`` …)."""

    name: str
    report: Report | None = None
    sched: NodeState | None = None
    domains: Mapping[str, str] = field(default_factory=dict)

    @property
    def unavailable(self) -> bool:
        return self.sched is not None and self.sched.state in UNAVAILABLE

    @property
    def ours(self) -> bool:
        """Drained by minutiae (only those we may resume)."""
        return (self.sched is not None and self.sched.ours
                and self.sched.state in (NodeSchedState.DRAINED, NodeSchedState.DRAINING))


UNAVAILABLE = frozenset({NodeSchedState.DRAINED, NodeSchedState.DRAINING, NodeSchedState.DOWN})


@dataclass(frozen=True, slots=True)
class NodeMemory:
    """What the controller remembers about one node between steps.

    ``unhealthy_since``: start of the current unhealthy episode (storm breaker input);
    ``healthy_since``: since when a node we drained reports clean (healthy delay);
    ``step``/``step_since``: the remediation rung requested and when; ``drains``: times of our
    drains within the lemon window; ``lemon``: k drains in d days (needs a human); ``held``: a
    human drained it (who and why: the web UI's drain, an undo of a resume): only a resolve
    returns it;
    ``last_hold``: the check that held the last wanted action (to tell new holds from repeats);
    ``acked``: fingerprints of findings a human acknowledged (``resolve``: they no longer
    drain; a new occurrence has a new fingerprint and does); ``seen_drained``: the scheduler
    was seen holding our drain (so an AVAILABLE node later means a human resumed it).
    """

    unhealthy_since: float | None = None
    healthy_since: float | None = None
    drained_at: float | None = None
    step: Action | None = None
    step_since: float | None = None
    drains: tuple[float, ...] = ()
    lemon: bool = False
    last_hold: str | None = None
    acked: frozenset[str] = frozenset()
    seen_drained: bool = False
    held: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"unhealthy_since": self.unhealthy_since, "healthy_since": self.healthy_since,
                "drained_at": self.drained_at, "step": self.step.label if self.step else None,
                "step_since": self.step_since, "drains": list(self.drains),
                "lemon": self.lemon, "last_hold": self.last_hold,
                "acked": sorted(self.acked), "seen_drained": self.seen_drained,
                "held": self.held}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> NodeMemory:
        step = d.get("step")
        return NodeMemory(
            unhealthy_since=d.get("unhealthy_since"), healthy_since=d.get("healthy_since"),
            drained_at=d.get("drained_at"),
            step=Action[step.upper()] if isinstance(step, str) else None,
            step_since=d.get("step_since"),
            drains=tuple(float(x) for x in d.get("drains", ())), lemon=bool(d.get("lemon")),
            last_hold=d.get("last_hold"),
            acked=frozenset(str(x) for x in d.get("acked", ()) if isinstance(x, str)),
            seen_drained=bool(d.get("seen_drained")),
            held=str(d["held"]) if d.get("held") else None)


EMPTY_MEMORY = NodeMemory()


@dataclass(frozen=True, slots=True)
class Pause:
    """The pause switch: set by a human (``by="human"``) or by the storm breaker
    (``by="breaker"``); only a human clears it."""

    reason: str
    since: float
    by: str = "human"


@dataclass(frozen=True, slots=True)
class ControllerMemory:
    nodes: Mapping[str, NodeMemory] = field(default_factory=dict)
    buckets: Mapping[str, Bucket] = field(default_factory=dict)
    pause: Pause | None = None
    #: set by ``unpause``: the storm breaker only counts nodes that turned unhealthy after it
    breaker_since: float | None = None


@dataclass(frozen=True, slots=True)
class FleetState:
    """Everything reconcile reads. ``scheduler`` names the backend (for undo commands);
    ``job_tolerance`` maps a job id to how many nodes it can lose (else the policy default)."""

    nodes: Mapping[str, NodeView]
    memory: ControllerMemory = field(default_factory=ControllerMemory)
    scheduler: str = "slurm"
    job_tolerance: Mapping[str, int] = field(default_factory=dict)
    #: this controller's owner tag, written into every drain reason (``cluster/controller``)
    owner: str = DEFAULT_OWNER


@dataclass(frozen=True, slots=True)
class Decision:
    """One thing the controller decided about one node at ``time``.

    ``action`` is the verb; ``wanted`` is what a HOLD would have done; ``rule`` the policy rule
    (or ``ladder``, ``healthy-delay``, ``lemon``); ``evidence`` the report lines behind it;
    ``budget`` the safety budget's verdict; ``undo`` the exact command that reverses it;
    ``step`` the remediation rung asked for; ``reason`` the scheduler reason written on drain;
    ``new`` is false for a HOLD that repeats the previous step's (notifiers skip those).
    """

    node: str
    action: Verb
    rule: str
    evidence: tuple[str, ...]
    budget: BudgetVerdict
    undo: str
    time: float
    step: Action | None = None
    reason: str = ""
    wanted: Verb | None = None
    new: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "action": self.action.value, "rule": self.rule,
                "evidence": list(self.evidence), "budget": self.budget.to_json(),
                "undo": self.undo, "time": self.time,
                "step": self.step.label if self.step else None, "reason": self.reason,
                "wanted": self.wanted.value if self.wanted else None, "new": self.new}


@dataclass(frozen=True, slots=True)
class Plan:
    """The output of one reconcile step: ``decisions`` (iterate the plan for them), the next
    ``memory``, and ``alerts`` (loud, human-facing lines such as a tripped storm breaker)."""

    decisions: tuple[Decision, ...]
    memory: ControllerMemory
    alerts: tuple[str, ...] = ()
    dry_run: bool = True

    def __iter__(self) -> Iterator[Decision]:
        return iter(self.decisions)

    def __len__(self) -> int:
        return len(self.decisions)

    def acting(self) -> tuple[Decision, ...]:
        """Decisions that do something (not HOLD)."""
        return tuple(d for d in self.decisions if d.action is not Verb.HOLD)


def undo_command(scheduler: str, verb: Verb, node: str, reason: str = "") -> str:
    """The command that reverses ``verb`` on ``node``: a drain's is ``minutiae resolve``
    (acknowledges the evidence, resumes through the backend: taint and annotations too);
    a resume's is the scheduler's own tool (the backend's ``undo_hint``); a HOLD, an ESCALATE
    or a RESOLVE touched no scheduler."""
    if verb is Verb.DRAIN:  # dry-run or a fake: no scheduler was touched, nothing to undo
        raw = undo_hint(scheduler, "drain", node)
        return raw if raw == NOTHING_TO_UNDO else resolve_command(node)
    if verb is Verb.RESUME:
        return undo_hint(scheduler, "resume", node, reason)
    if verb is Verb.ESCALATE:
        return "none needed: escalation only records the requested remediation"
    if verb is Verb.RESOLVE:
        return "none needed: new evidence drains the node again"
    return "nothing was done"


def resolve_command(node: str) -> str:
    """``explain``'s undo of a drain: ``minutiae resolve`` (the scheduler's own command is
    ``scheduler_undo``, a secondary hint)."""
    return f"minutiae resolve {node} --now --reason 'fixed: <what was done>'"


def scheduler_undo(scheduler: str, node: str) -> str:
    """The scheduler's own command that reverses our drain (no acknowledgement: the evidence
    still there drains the node again unless it is resolved)."""
    return undo_hint(scheduler, "drain", node)

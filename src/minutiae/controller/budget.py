"""The safety budget (pure): may the controller take this node out of service *now*?

Every drain the reconcile step wants goes through :func:`check_drain`, in priority order, against
a :class:`BudgetLedger` that already counts what is unavailable and what this step has planned.
The checks, in order (the first that refuses names itself in the verdict):

1. ``global``   — unavailable nodes / fleet size must stay ≤ ``max_unavailable_fraction``.
2. ``domain:<d>`` — unavailable nodes in one failure domain (rack, leaf switch, NVLink domain)
   must stay ≤ ``domain_caps[d]``.
   In both, a *silent* node (its agent never reported, or stopped reporting) counts as
   unavailable: a node nobody hears from is not a healthy one.
3. ``job``      — nodes of one running job that are unavailable must stay ≤ what the job survives
   (``job_tolerance[job]`` when known, else ``per_job_max_nodes``).
4. ``rate:<verb>`` — a token bucket per action type (``per_minute`` refill, ``burst`` capacity).

The storm breaker (:func:`storm_tripped`) and the pause switch are checked by the reconcile step
before any of these: while either holds, nothing is done at all.
Nothing here reads the clock or does I/O; ``now`` is passed in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class RateLimit:
    """Token bucket: ``burst`` tokens at most, refilled at ``per_minute`` tokens per minute."""

    per_minute: float
    burst: float


@dataclass(frozen=True, slots=True)
class StormConfig:
    """Trip when more than ``fraction`` of the fleet (and at least ``min_nodes`` nodes) turned
    unhealthy within the last ``window_s`` seconds."""

    fraction: float = 0.10
    window_s: float = 600.0
    min_nodes: int = 3


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    max_unavailable_fraction: float = 0.10
    domain_caps: Mapping[str, int] = field(default_factory=dict)
    per_job_max_nodes: int = 1
    rates: Mapping[str, RateLimit] = field(default_factory=dict)
    storm: StormConfig = field(default_factory=StormConfig)


@dataclass(frozen=True, slots=True)
class Bucket:
    """A token bucket's state at time ``t``."""

    tokens: float
    t: float

    def refilled(self, limit: RateLimit, now: float) -> Bucket:
        gained = max(0.0, now - self.t) * limit.per_minute / 60.0
        return Bucket(min(limit.burst, self.tokens + gained), now)


@dataclass(frozen=True, slots=True)
class BudgetVerdict:
    """The budget's answer for one action. ``allowed`` false means the action is held;
    ``check`` names the rule that decided (``ok`` when every check passed, else ``global``,
    ``domain:rack``, ``job``, ``rate:drain``, ``paused``, ``storm``, ``lemon``…) and ``detail``
    says it with numbers, for ``minutiae explain``."""

    allowed: bool
    check: str
    detail: str

    def to_json(self) -> dict[str, object]:
        return {"allowed": self.allowed, "check": self.check, "detail": self.detail}

    @staticmethod
    def from_json(d: Mapping[str, object]) -> BudgetVerdict:
        return BudgetVerdict(bool(d.get("allowed")), str(d.get("check", "")), str(d.get("detail", "")))


OK_UNLIMITED = BudgetVerdict(True, "ok", "no budget applies")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the budget needs to know about one node. ``silent``: in service as far as the
    scheduler says, but no fresh report (counted as unavailable in the global and domain
    checks, not in the per-job one: the job may well be running on it)."""

    node: str
    unavailable: bool
    domains: Mapping[str, str] = field(default_factory=dict)
    jobs: tuple[str, ...] = ()
    silent: bool = False


@dataclass
class BudgetLedger:
    """Counts of unavailable nodes (fleet, per domain value, per job) plus what this reconcile
    step has already planned. Built once per step with :meth:`build`; mutated only by
    :func:`check_drain` when it allows a drain (a local accumulator, never shared)."""

    total: int
    unavailable: int
    per_domain: Counter[tuple[str, str]]
    per_job: Counter[str]
    buckets: dict[str, Bucket]
    silent: int = 0

    @staticmethod
    def build(nodes: Iterable[NodeFacts], buckets: Mapping[str, Bucket]) -> BudgetLedger:
        total = 0
        unavailable = 0
        per_domain: Counter[tuple[str, str]] = Counter()
        per_job: Counter[str] = Counter()
        silent = 0
        for n in nodes:
            total += 1
            if n.unavailable or n.silent:
                unavailable += 1
                silent += not n.unavailable
                for d, v in n.domains.items():
                    per_domain[(d, v)] += 1
            if n.unavailable:
                for j in n.jobs:
                    per_job[j] += 1
        return BudgetLedger(total, unavailable, per_domain, per_job, dict(buckets), silent)


def take_token(ledger: BudgetLedger, cfg: BudgetConfig, verb: str, now: float) -> BudgetVerdict:
    """Consume one token of ``verb``'s bucket if it has one (no limit configured: allowed)."""
    limit = cfg.rates.get(verb)
    if limit is None:
        return BudgetVerdict(True, "ok", f"no rate limit on {verb}")
    b = ledger.buckets.get(verb, Bucket(limit.burst, now)).refilled(limit, now)
    if b.tokens < 1.0:
        ledger.buckets[verb] = b
        wait = (1.0 - b.tokens) * 60.0 / limit.per_minute if limit.per_minute > 0 else float("inf")
        return BudgetVerdict(False, f"rate:{verb}",
                             f"{verb} rate limit {limit.per_minute:g}/min (burst {limit.burst:g}) "
                             f"spent; next token in {wait:.0f}s")
    ledger.buckets[verb] = replace(b, tokens=b.tokens - 1.0)
    return BudgetVerdict(True, "ok", f"{verb} token taken ({b.tokens - 1.0:.1f} left)")


def check_drain(ledger: BudgetLedger, cfg: BudgetConfig, node: NodeFacts, now: float,
                job_tolerance: Mapping[str, int] | None = None) -> BudgetVerdict:
    """May ``node`` be drained now? On yes, the ledger counts it (and its token is spent)."""
    if node.unavailable:
        return BudgetVerdict(True, "ok", "node already unavailable; no budget spent")
    after = ledger.unavailable + 1
    limit = int(cfg.max_unavailable_fraction * ledger.total + 1e-9)
    quiet = f" ({ledger.silent} silent)" if ledger.silent else ""
    if after > limit:
        return BudgetVerdict(False, "global",
                             f"{after}/{ledger.total} nodes unavailable{quiet} would exceed "
                             f"max_unavailable_fraction {cfg.max_unavailable_fraction:g} "
                             f"(limit {limit})")
    for d, v in sorted(node.domains.items()):
        cap = cfg.domain_caps.get(d)
        if cap is not None and ledger.per_domain[(d, v)] + 1 > cap:
            return BudgetVerdict(False, f"domain:{d}",
                                 f"{ledger.per_domain[(d, v)]} node(s) of {d} {v} already "
                                 f"unavailable; cap {cap}")
    tol = job_tolerance or {}
    for j in node.jobs:
        cap = tol.get(j, cfg.per_job_max_nodes)
        if ledger.per_job[j] + 1 > cap:
            return BudgetVerdict(False, "job",
                                 f"job {j} already lost {ledger.per_job[j]} node(s); "
                                 f"it survives {cap}")
    tok = take_token(ledger, cfg, "drain", now)
    if not tok.allowed:
        return tok
    ledger.unavailable = after
    for d, v in node.domains.items():
        ledger.per_domain[(d, v)] += 1
    for j in node.jobs:
        ledger.per_job[j] += 1
    return BudgetVerdict(True, "ok", f"{after}/{ledger.total} unavailable{quiet} within limit "
                         f"{limit}; {tok.detail}")


def storm_tripped(turned_unhealthy: Iterable[float], total: int, cfg: StormConfig,
                  now: float) -> str | None:
    """The breaker's reason when more than ``cfg.fraction`` of ``total`` nodes (and at least
    ``cfg.min_nodes``) turned unhealthy in the last ``cfg.window_s`` seconds, else None.
    ``turned_unhealthy`` holds each currently unhealthy node's transition time."""
    since = now - cfg.window_s
    recent = sum(1 for t in turned_unhealthy if t >= since)
    if total <= 0 or recent < cfg.min_nodes:
        return None
    if recent / total > cfg.fraction:
        return (f"storm breaker: {recent}/{total} nodes ({100.0 * recent / total:.0f}%) turned "
                f"unhealthy within {cfg.window_s:g}s (threshold {100.0 * cfg.fraction:g}%); "
                f"stopped acting, waiting for a human (minutiae unpause)")
    return None

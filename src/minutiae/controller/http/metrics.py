"""The controller's Prometheus metrics (one registry per app) and the ``/metrics`` route."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from minutiae.controller.service import Controller
from minutiae.controller.state import Decision, Verb

#: seconds; a report is validated and kept in memory in ~0.1 ms (written behind, per step)
INGEST_BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2, 0.25)
#: seconds from the node's report to the decision sent to the scheduler (a step is event-driven)
DECISION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass
class Metrics:
    reg: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        reg = self.reg
        self.reports = Counter("minutiae_controller_reports", "Agent reports accepted",
                               registry=reg)
        self.refused = Counter("minutiae_controller_refused", "Requests refused", ["why"],
                               registry=reg)
        self.nodes = Gauge("minutiae_controller_nodes", "Nodes by health", ["health"],
                           registry=reg)
        self.paused = Gauge("minutiae_controller_paused",
                            "1 while paused or the breaker is tripped", registry=reg)
        self.actions = Gauge("minutiae_controller_actions", "Actions by outcome", ["outcome"],
                             registry=reg)
        self.step = Gauge("minutiae_controller_step_seconds",
                          "Duration of the last reconcile step", registry=reg)
        # deploy/prometheus/METRICS.md: the series the alert rules and dashboards read
        self.breaker = Gauge("minutiae_controller_breaker_tripped",
                             "1 while the storm breaker is tripped (its reason as label)",
                             ["reason"], registry=reg)
        self.paused_s = Gauge("minutiae_controller_paused_seconds",
                              "Seconds since the operator's pause began (0: not paused)",
                              registry=reg)
        self.leader = Gauge("minutiae_controller_leader", "1 on the leader, 0 on a standby",
                            registry=reg)
        self.silent = Gauge("minutiae_controller_silent_nodes",
                            "In service by the scheduler's word but without a fresh report",
                            registry=reg)
        self.unavailable = Gauge("minutiae_controller_unavailable_nodes",
                                 "Nodes the safety budget counts as unavailable", registry=reg)
        self.budget_max = Gauge("minutiae_controller_budget_max_unavailable",
                                "The policy's fleet-wide limit on unavailable nodes",
                                registry=reg)
        self.decisions = Counter("minutiae_controller_decisions", "Decisions made (holds "
                                 "included)", ["verb", "rule"], registry=reg)
        self.sched_up = Gauge("minutiae_controller_scheduler_up", "1 if the scheduler answered "
                              "the last read of node states, else 0", ["scheduler"], registry=reg)
        self.ingest = Histogram("minutiae_controller_ingest_duration_seconds",
                                "Time to validate and keep one agent report",
                                buckets=INGEST_BUCKETS, registry=reg)
        self.latency = Histogram("minutiae_controller_decision_latency_seconds",
                                 "The node's last report received -> decision sent to the "
                                 "scheduler", ["verb"], buckets=DECISION_BUCKETS, registry=reg)

    def refuse(self, why: str) -> None:
        self.refused.labels(why).inc()


_TIMED = (Verb.DRAIN, Verb.RESUME, Verb.ESCALATE)


@dataclass
class DecisionCounter:
    """A notifier that counts every new decision (``minutiae_controller_decisions_total``) and
    times those sent to the scheduler from the node's last report
    (``minutiae_controller_decision_latency_seconds``; notifiers run after the actions)."""

    m: Metrics
    controller: Controller

    def notify(self, decisions: Sequence[Decision], alerts: Sequence[str] = ()) -> None:
        now = self.controller.clock.now()
        reports = self.controller.intake.reports
        for d in decisions:
            self.m.decisions.labels(d.action.value,
                                    "" if d.action is Verb.RESUME else d.rule).inc()
            rep = reports.get(d.node)
            if d.action in _TIMED and rep is not None:
                self.m.latency.labels(d.action.value).observe(max(0.0, now - rep.time))


def fleet_gauges(controller: Controller, m: Metrics, st: dict[str, Any]) -> None:
    """The METRICS.md gauges from ``status()`` (``role`` when the controller says it)."""
    pause = controller.memory.pause
    m.breaker.clear()   # one series: the reason while tripped, reason="" and 0 when armed
    if pause is not None and pause.by == "breaker":
        m.breaker.labels(pause.reason).set(1)
    else:
        m.breaker.labels("").set(0)
    human = pause is not None and pause.by != "breaker"
    m.paused_s.set(max(0.0, controller.clock.now() - pause.since) if human and pause else 0.0)
    m.leader.set(0 if st.get("role", "leader") != "leader" else 1)
    up = st["counters"].get("scheduler_up")
    m.sched_up.clear()
    if up is not None:
        m.sched_up.labels(controller.backend.name).set(1 if up else 0)
    m.silent.set(st["silent"])
    m.unavailable.set(st["unavailable"] + st["silent"])
    frac = controller.policy.budget.max_unavailable_fraction
    m.budget_max.set(int(frac * st["nodes"] + 1e-9))


def router(controller: Controller, m: Metrics) -> APIRouter:
    r = APIRouter()
    controller.notifiers.append(DecisionCounter(m, controller))

    @r.get("/metrics", include_in_schema=False)
    async def metrics() -> PlainTextResponse:
        st = controller.status()
        for h, n in st["health"].items():
            m.nodes.labels(h).set(n)
        m.paused.set(1 if st["paused"] else 0)
        m.actions.labels("done").set(st["counters"]["actions_done"])
        m.actions.labels("failed").set(st["counters"]["actions_failed"])
        if st["counters"]["last_step_ms"] is not None:
            m.step.set(st["counters"]["last_step_ms"] / 1e3)
        fleet_gauges(controller, m, st)
        return PlainTextResponse(generate_latest(m.reg).decode(),
                                 media_type="text/plain; version=0.0.4")

    return r

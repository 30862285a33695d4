"""The controller's Prometheus metrics (one registry per app) and the ``/metrics`` route."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from minutiae.controller.service import Controller


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

    def refuse(self, why: str) -> None:
        self.refused.labels(why).inc()


def router(controller: Controller, m: Metrics) -> APIRouter:
    r = APIRouter()

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
        return PlainTextResponse(generate_latest(m.reg).decode(),
                                 media_type="text/plain; version=0.0.4")

    return r

"""The controller's HTTP API (FastAPI; OpenAPI at ``/docs`` and ``/openapi.json``).

Agent reports, job step timings, ``pause`` and ``unpause`` need ``Authorization: Bearer
<token>`` (compared in constant time); reads (status, nodes, explain, audit, metrics) do not.
"""

from __future__ import annotations

import gc
import hmac
import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from minutiae import __version__
from minutiae.controller.http.fastpath import FastPath, Receive, Scope, Send, status_for
from minutiae.controller.http.models import (
    HeartbeatIn,
    PauseIn,
    ReportIn,
    TimingsIn,
    ToleranceIn,
)
from minutiae.controller.runs import record_job_run
from minutiae.controller.service import Controller
from minutiae.controller.wire import validate_job
from minutiae.errors import DataError, MinutiaeError, ValidationError
from minutiae.schedulers.base import make_reason, validate_node

MAX_BODY = 1 << 20
MIN_GAP_S = 0.05
GC_FULL_S = 900.0


class ControllerApp(FastAPI):
    """FastAPI behind the ingest fast path (``minutiae.controller.http.fastpath``): the hot
    endpoints are answered before the framework's middleware and routing, everything else
    (and ``lifespan``) goes to FastAPI."""

    fast: FastPath | None = None

    async def framework(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.fast is None:
            await super().__call__(scope, receive, send)
        else:
            await self.fast(scope, receive, send)


def make_app(controller: Controller, token: str,
             loop_interval: float | None = None) -> ControllerApp:
    """The app. With ``loop_interval`` the reconcile loop runs in a thread for the app's life."""
    expected = f"Bearer {token}".encode()
    reg = CollectorRegistry()
    m_reports = Counter("minutiae_controller_reports", "Agent reports accepted", registry=reg)
    m_refused = Counter("minutiae_controller_refused", "Requests refused", ["why"], registry=reg)
    g_nodes = Gauge("minutiae_controller_nodes", "Nodes by health", ["health"], registry=reg)
    g_paused = Gauge("minutiae_controller_paused", "1 while paused or the breaker is tripped",
                     registry=reg)
    g_actions = Gauge("minutiae_controller_actions", "Actions by outcome", ["outcome"],
                      registry=reg)
    g_step = Gauge("minutiae_controller_step_seconds", "Duration of the last reconcile step",
                   registry=reg)
    stop = threading.Event()

    def loop() -> None:
        """Step every ``loop_interval`` s, or as soon as a report changes a node's picture;
        woken steps are at least ``MIN_GAP_S`` apart so a burst of reports is one step."""
        assert loop_interval is not None
        gap = min(MIN_GAP_S, loop_interval)
        last_full = time.monotonic()
        while not stop.is_set():
            t0 = time.monotonic()
            controller.wake.wait(loop_interval)
            if stop.is_set():
                break
            rest = gap - (time.monotonic() - t0)
            if rest > 0:
                stop.wait(rest)
            controller.wake.clear()
            try:
                controller.step()
            except Exception as exc:  # keep the loop alive; say what failed
                controller.problem(f"reconcile step failed: {type(exc).__name__}: {exc}")
            # The fleet's long-lived objects (20,000 reports and views) leave the cyclic GC's
            # generations after each step: full collections over them paused every request
            # for 0.1-0.3 s, a few times a minute at 2,000 reports/s (the p99 tail). Objects
            # are still freed by reference counting; reference cycles are reclaimed by one
            # full collection every GC_FULL_S.
            if time.monotonic() - last_full >= GC_FULL_S:
                gc.unfreeze()
                gc.collect()
                last_full = time.monotonic()
            gc.freeze()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        t = None
        if loop_interval is not None:
            controller.retry_pending()
            t = threading.Thread(target=loop, name="minutiae-reconcile", daemon=True)
            t.start()
        yield
        stop.set()
        controller.wake.set()
        if t is not None:
            t.join(timeout=10)

    app = ControllerApp(title="minutiae controller", version=__version__, lifespan=lifespan,
                        description="Fleet health reports in, safe drains/resumes out. "
                                    "See docs/controller.md.")

    async def auth(request: Request) -> None:
        got = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(got, expected):
            m_refused.labels("token").inc()
            raise HTTPException(401, "missing or invalid bearer token",
                                headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(MinutiaeError)
    async def _minutiae_error(request: Request, exc: MinutiaeError) -> JSONResponse:
        m_refused.labels(type(exc).__name__).inc()
        return JSONResponse({"detail": str(exc)}, status_code=status_for(exc))

    def ingest_report(raw: bytes) -> tuple[int, dict[str, Any]]:
        """One parse of the body, validated by ``minutiae.controller.wire``; or a heartbeat
        ``{"node", "digest", "agent"}`` for an unchanged verdict (``controller.intake``)."""
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise DataError(f"body is not JSON: {exc}", "report") from None
        rep, digest = controller.ingest_digest(body, raw)
        m_reports.inc()
        return 202, {"node": rep.node, "accepted": True, "received": rep.time, "digest": digest}

    def echo_body(raw: bytes) -> tuple[int, dict[str, Any]]:
        return 200, {"accepted": True, "bytes": len(raw)}

    # the hot path: token, body limit, validation and ingest without the framework's routing
    app.fast = FastPath(app.framework, token=token, max_body=MAX_BODY,
                        handlers={"/v1/reports": ingest_report, "/v1/echo": echo_body},
                        refused=lambda why: m_refused.labels(why).inc())

    @app.post("/v1/reports", status_code=202, dependencies=[Depends(auth)],
              summary="An agent's report (verdict + findings) for one node",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": {"oneOf": [
                      {"$ref": "#/components/schemas/ReportIn"},
                      {"$ref": "#/components/schemas/HeartbeatIn"}]}}}}})
    async def post_report(request: Request) -> JSONResponse:
        """Answered by the ASGI fast path (``minutiae.controller.http.fastpath``) with the same
        checks; this route documents it (the schema above) and calls the same handler."""
        code, out = ingest_report(await request.body())
        return JSONResponse(out, status_code=code)

    @app.post("/v1/echo", dependencies=[Depends(auth)], include_in_schema=False)
    async def echo(request: Request) -> dict[str, Any]:
        """Benchmark baseline: the same server, fast path and token check; the body is read
        but neither parsed nor validated, and the controller is not involved."""
        return echo_body(await request.body())[1]

    @app.post("/v1/timings", status_code=202, dependencies=[Depends(auth)],
              summary="Step timings of a running job")
    async def post_timings(t: TimingsIn) -> dict[str, Any]:
        now = controller.clock.now()
        validate_job(t.job)
        rows = []
        for s in t.steps:
            if s.node is not None:
                validate_node(s.node)
            rows.append((t.job, s.step, s.rank, s.node, s.seconds, now))
        controller.store.save_timings(rows)
        out: dict[str, Any] = {"job": t.job, "accepted": len(rows)}
        try:
            rec = record_job_run(controller.store, t.job, signature=t.signature, start=t.start,
                                 end=t.end, gpus=t.gpus, versions=t.versions)
        except DataError as exc:   # the timings are kept; the run waits for usable ones
            out["run"] = None
            out["run_note"] = str(exc)
        else:
            out["run"] = {"run_id": rec.run_id, "signature": rec.signature,
                          "seconds_per_step": rec.value, "nodes": len(rec.nodes),
                          "gpus": rec.gpus}
        return out

    @app.put("/v1/jobs/{job}/tolerance", dependencies=[Depends(auth)],
             summary="How many nodes of a running job may be out at once (budget)")
    async def put_tolerance(job: str, t: ToleranceIn) -> dict[str, Any]:
        controller.set_tolerance(validate_job(job), t.nodes)
        return {"job": job, "tolerance": t.nodes}

    @app.delete("/v1/jobs/{job}/tolerance", dependencies=[Depends(auth)],
                summary="Forget a job's tolerance (the policy's per_job_max_nodes applies)")
    async def delete_tolerance(job: str) -> dict[str, Any]:
        controller.set_tolerance(validate_job(job), None)
        return {"job": job, "tolerance": None}

    @app.get("/v1/jobs", summary="Per-job tolerances set through the API")
    async def jobs() -> dict[str, Any]:
        return {"tolerance": controller.tolerances(),
                "from_scheduler": controller.scheduler_tolerances(),
                "default": controller.policy.budget.per_job_max_nodes}

    @app.post("/v1/pause", dependencies=[Depends(auth)], summary="Stop acting (with a reason)")
    async def pause(p: PauseIn) -> dict[str, Any]:
        reason = make_reason(p.reason)
        controller.pause(reason)
        return {"paused": True, "reason": reason}

    @app.post("/v1/unpause", dependencies=[Depends(auth)],
              summary="Resume acting; also re-arms a tripped storm breaker")
    async def unpause() -> dict[str, Any]:
        controller.unpause()
        return {"paused": False}

    @app.get("/v1/status", summary="Fleet summary, pause/breaker state, recent problems")
    async def status() -> dict[str, Any]:
        return controller.status()

    @app.get("/v1/nodes", summary="Every reporting node with health and scheduler state")
    async def nodes() -> list[dict[str, Any]]:
        return controller.node_rows()

    @app.get("/v1/nodes/{node}/explain",
             summary="Why a node is drained: evidence, rule, budget decision, undo command")
    async def explain(node: str) -> dict[str, Any]:
        try:
            validate_node(node)
        except ValidationError as exc:
            raise HTTPException(422, str(exc)) from None
        return controller.explain(node)

    @app.get("/v1/audit", summary="The audit log, newest first")
    async def audit(node: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        if node is not None:
            validate_node(node)
        return [r.to_json() for r in controller.store.audit(node=node,
                                                             limit=max(1, min(limit, 10000)))]

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "last_step": controller.last_step}

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> PlainTextResponse:
        st = controller.status()
        for h, n in st["health"].items():
            g_nodes.labels(h).set(n)
        g_paused.set(1 if st["paused"] else 0)
        g_actions.labels("done").set(st["counters"]["actions_done"])
        g_actions.labels("failed").set(st["counters"]["actions_failed"])
        if st["counters"]["last_step_ms"] is not None:
            g_step.set(st["counters"]["last_step_ms"] / 1e3)
        return PlainTextResponse(generate_latest(reg).decode(),
                                 media_type="text/plain; version=0.0.4")

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version,
                               description=app.description, routes=app.routes)
            schemas = spec.setdefault("components", {}).setdefault("schemas", {})
            for model in (ReportIn, HeartbeatIn):
                sch = model.model_json_schema(ref_template="#/components/schemas/{model}")
                schemas.update(sch.pop("$defs", {}))
                schemas[model.__name__] = sch
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app

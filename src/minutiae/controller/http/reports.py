"""Agent reports in (``POST /v1/reports``, answered by the fast path once the report is
stored: ``minutiae.controller.http.acks``) and the benchmark echo."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.params import Depends
from fastapi.responses import Response

from minutiae.controller.http.fastpath import FastPath, Hot
from minutiae.controller.http.metrics import Metrics
from minutiae.controller.service import Controller
from minutiae.errors import DataError


def handlers(controller: Controller, m: Metrics) -> dict[str, Hot]:
    """The hot endpoints (path → handler), shared by the fast paths and the routes below."""

    def ingest_report(raw: bytes) -> tuple[int, bytes, int | None]:
        """One parse of the body, validated by ``minutiae.controller.wire``; or a heartbeat
        ``{"node", "digest", "agent"}`` for an unchanged verdict (``controller.intake``).
        The answer, and the ticket of the take that stores the report: the fast path answers
        once it is stored (a 503 when the store could not take it)."""
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise DataError(f"body is not JSON: {exc}", "report") from None
        rep, digest, ticket = controller.ingest_digest(body, raw)
        # the answer encoded here (the hot path; the time is a finite float)
        return 202, (f'{{"node":{json.dumps(rep.node)},"accepted":true,"received":'
                     f'{rep.time!r},"digest":{json.dumps(digest)}}}').encode(), ticket

    def reported(t0: float) -> None:
        m.reports.inc()
        m.ingest.observe(time.perf_counter() - t0)

    def echo_body(raw: bytes) -> tuple[int, dict[str, Any], int | None]:
        return 200, {"accepted": True, "bytes": len(raw)}, None

    return {"/v1/reports": Hot(ingest_report, reported), "/v1/echo": Hot(echo_body)}


def router(fast: FastPath, auth: Sequence[Depends]) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/reports", status_code=202, dependencies=auth,
            summary="An agent's report (verdict + findings) for one node",
            openapi_extra={"requestBody": {"required": True, "content": {
                "application/json": {"schema": {"oneOf": [
                    {"$ref": "#/components/schemas/ReportIn"},
                    {"$ref": "#/components/schemas/HeartbeatIn"}]}}}}})
    async def post_report(request: Request) -> Response:
        """Answered by the ASGI fast path (``minutiae.controller.http.fastpath``) with the same
        checks; this route documents it (the schema above) and calls the same handler."""
        code, out = await fast.run(fast.handlers["/v1/reports"], await request.body(), None)
        return Response(out, status_code=code, media_type="application/json")

    @r.post("/v1/echo", dependencies=auth, include_in_schema=False)
    async def echo(request: Request) -> dict[str, Any]:
        """Benchmark baseline: the same server, fast path and token check; the body is read
        but neither parsed nor validated, and the controller is not involved."""
        out: dict[str, Any] = (await fast.run(fast.handlers["/v1/echo"],
                                              await request.body(), None))[1]
        return out

    return r

"""The read-only views: status and healthz (no token); nodes, explain and audit show evidence
(kernel-log lines, reasons) and take ``evidence_auth`` (the read-only or the admin token when
``serve`` has a read token)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.params import Depends

from minutiae.controller.service import Controller
from minutiae.errors import ValidationError
from minutiae.schedulers.base import validate_node


def router(controller: Controller, evidence_auth: Sequence[Depends] = ()) -> APIRouter:
    r = APIRouter()
    auth = list(evidence_auth)

    @r.get("/v1/status", summary="Fleet summary, pause/breaker state, recent problems")
    async def status() -> dict[str, Any]:
        return controller.status()

    @r.get("/v1/nodes", dependencies=auth,
           summary="Every reporting node with health and scheduler state")
    async def nodes() -> list[dict[str, Any]]:
        return controller.node_rows()

    @r.get("/v1/nodes/{node}/explain", dependencies=auth,
           summary="Why a node is drained: evidence, rule, budget decision, undo command")
    async def explain(node: str) -> dict[str, Any]:
        try:
            validate_node(node)
        except ValidationError as exc:
            raise HTTPException(422, str(exc)) from None
        return controller.explain(node)

    @r.get("/v1/audit", dependencies=auth, summary="The audit log, newest first")
    async def audit(node: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        if node is not None:
            validate_node(node)
        return [row.to_json() for row in controller.store.audit(node=node,
                                                                 limit=max(1, min(limit, 10000)))]

    @r.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "last_step": controller.last_step}

    return r

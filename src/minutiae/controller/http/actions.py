"""A human's switches: ``pause`` (stop acting, with a reason), ``unpause`` and ``resolve``
(return a node to service, acknowledging its current findings)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.params import Depends

from minutiae.controller.http.models import PauseIn, ResolveIn
from minutiae.controller.service import Controller
from minutiae.schedulers.base import make_reason


def router(controller: Controller, auth: Sequence[Depends]) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/pause", dependencies=auth, summary="Stop acting (with a reason)")
    async def pause(p: PauseIn) -> dict[str, Any]:
        reason = make_reason(p.reason)
        controller.pause(reason)
        return {"paused": True, "reason": reason}

    @r.post("/v1/unpause", dependencies=auth,
            summary="Resume acting; also re-arms a tripped storm breaker")
    async def unpause() -> dict[str, Any]:
        controller.unpause()
        return {"paused": False}

    @r.post("/v1/nodes/{node}/resolve", dependencies=auth,
            summary="Return a node to service: acknowledge its findings, resume (audited)")
    def resolve(node: str, body: ResolveIn) -> dict[str, Any]:
        if controller.leadership.fence() is None:
            lead = controller.leadership.status().leader or "unknown"
            raise HTTPException(409, f"standby: only the leader ({lead}) acts; resolve there")
        return controller.resolve(node, body.reason, now=body.now, by=body.by or "api")

    return r

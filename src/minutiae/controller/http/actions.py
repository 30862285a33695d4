"""A human's switches: ``pause`` (stop acting, with a reason) and ``unpause``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter
from fastapi.params import Depends

from minutiae.controller.http.models import PauseIn
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

    return r

"""Jobs: step timings of a running job, and per-job tolerances (how many nodes it may lose)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter
from fastapi.params import Depends

from minutiae.controller.http.models import TimingsIn, ToleranceIn
from minutiae.controller.runs import check_span, check_timing, record_job_run
from minutiae.controller.service import Controller
from minutiae.controller.wire import validate_job
from minutiae.errors import DataError
from minutiae.schedulers.base import validate_node


def router(controller: Controller, auth: Sequence[Depends]) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/timings", status_code=202, dependencies=auth,
            summary="Step timings of a running job")
    async def post_timings(t: TimingsIn) -> dict[str, Any]:
        now = controller.clock.now()
        validate_job(t.job)
        check_span(t.start, t.end, t.gpus)
        rows = []
        for s in t.steps:
            check_timing(s.step, s.rank, s.seconds)
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

    @r.put("/v1/jobs/{job}/tolerance", dependencies=auth,
           summary="How many nodes of a running job may be out at once (budget)")
    async def put_tolerance(job: str, t: ToleranceIn) -> dict[str, Any]:
        controller.set_tolerance(validate_job(job), t.nodes)
        return {"job": job, "tolerance": t.nodes}

    @r.delete("/v1/jobs/{job}/tolerance", dependencies=auth,
              summary="Forget a job's tolerance (the policy's per_job_max_nodes applies)")
    async def delete_tolerance(job: str) -> dict[str, Any]:
        controller.set_tolerance(validate_job(job), None)
        return {"job": job, "tolerance": None}

    @r.get("/v1/jobs", summary="Per-job tolerances set through the API")
    async def jobs() -> dict[str, Any]:
        return {"tolerance": controller.tolerances(),
                "from_scheduler": controller.scheduler_tolerances(),
                "default": controller.policy.budget.per_job_max_nodes}

    return r

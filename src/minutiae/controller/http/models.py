"""The controller API's documented request bodies (pydantic; OpenAPI at ``/docs``). The hot
``/v1/reports`` is validated by ``minutiae.controller.wire`` on the fast path; these models
describe it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class FindingIn(BaseModel):
    kind: str = Field(max_length=64, examples=["xid"])
    severity: str = Field("info", examples=["critical"])
    action: str = Field("none", examples=["reboot"])
    message: str = ""
    code: int | None = None
    pci: str | None = None
    component: str | None = None
    line: str | None = None
    rule: str | None = None
    attrs: dict[str, str | int | float | bool | None] = {}


class CheckIn(BaseModel):
    check: str = Field(examples=["gpu"])
    status: str = Field(examples=["ok", "warning", "critical", "unknown"])
    reason: str | None = None
    observed: int = 0
    findings: list[FindingIn] = []


class ReportIn(BaseModel):
    """One node's verdict and findings, as ``minutiae agent`` sends it every interval."""

    node: str = Field(examples=["gpu017"])
    time: float | None = Field(None, description="agent clock (informational; the "
                               "controller stamps its own receive time)")
    status: str = Field(examples=["critical"])
    checks: list[CheckIn] = []
    findings: list[FindingIn] = []
    domains: dict[str, str] = Field({}, examples=[{"rack": "r03", "leaf": "leaf1",
                                                   "nvl_domain": "nvl3"}])
    agent: dict[str, Any] = {}


class HeartbeatIn(BaseModel):
    """An unchanged-report heartbeat: the agent's verdict is the one the controller
    acknowledged with ``digest``; only the node's report time is refreshed. 409 when the digest
    is not the node's current one (the agent then sends the full report)."""

    node: str = Field(examples=["gpu017"])
    digest: str = Field(pattern="^[0-9a-f]{32}$", description="the `digest` of the 202 answer "
                        "to this node's last full report")
    agent: dict[str, Any] = Field({}, examples=[{"version": "0.1.0", "seq": 43, "age_s": 0.0}])


class StepTiming(BaseModel):
    step: int
    seconds: float = Field(ge=0)
    rank: int | None = None
    node: str | None = None


class TimingsIn(BaseModel):
    """Per-step timings of a running job (e.g. from a training loop hook). Every post also
    records the job as one run in the run history (``minutiae.history``): its value is the
    median over steps of the slowest rank, from all timings of the job received so far.
    ``signature`` names what makes runs comparable (model, config, world size; default: the
    job id, i.e. comparable with nothing); ``start`` defaults to the first timing's arrival,
    ``gpus`` to the number of ranks; ``versions`` are software-stack attributes
    (``{"driver": ["570.158.01"]}``) for regression attribution."""

    job: str = Field(max_length=128, examples=["4242"])
    steps: list[StepTiming] = Field(max_length=100_000)
    signature: str | None = Field(None, max_length=256, examples=["llama3-8b/tp8pp4/512gpu"])
    start: float | None = Field(None, description="job start (Unix time)")
    end: float | None = Field(None, description="job end (Unix time), when it ended")
    gpus: int | None = Field(None, ge=1)
    versions: dict[str, list[str]] = Field({}, examples=[{"driver": ["570.158.01"],
                                                          "nccl": ["2.21.5"]}])


class PauseIn(BaseModel):
    reason: str = Field(examples=["firmware rollout on rack r03"])


class ResolveIn(BaseModel):
    """A human returns a node to service: its current findings are acknowledged; resumed
    after the policy's healthy delay, or at once with ``now``."""

    reason: str = Field(min_length=1, max_length=300, examples=["GPU 3 reseated, dcgmi diag -r 3 passed"])
    now: bool = False
    by: str | None = Field(default=None, max_length=100, examples=["alice@login1"])




class ToleranceIn(BaseModel):
    """How many of a running job's nodes may be out of service at once (the safety budget's
    per-job check; overrides the policy's ``per_job_max_nodes`` for this job)."""

    nodes: int = Field(ge=0, le=100_000, examples=[2])

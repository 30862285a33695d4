"""A Node object (and the pods on it) as the controller sees it: ``NodeState`` (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from minutiae.schedulers.base import NodeSchedState, NodeState, owns
from minutiae.schedulers.kubernetes import owner as _owner
from minutiae.schedulers.kubernetes.owner import REASON_KEY, owner_of

__all__ = ["job_of", "jobs_of", "movable", "node_state"]


def movable(pod: dict[str, Any]) -> bool:
    """Pods a drain moves: not DaemonSet-owned, not mirror/static, not finished, not deleting."""
    meta = pod.get("metadata", {})
    if meta.get("deletionTimestamp"):
        return False
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
        return False
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def job_of(pod: dict[str, Any]) -> str:
    """The job a pod belongs to, for the per-job budget: its controlling owner
    (``namespace/Kind/name``: a Job, JobSet, PyTorchJob, StatefulSet …, so the pods of one
    distributed job on several nodes count as one job), else the pod itself (``namespace/name``)."""
    meta = pod.get("metadata", {})
    ns = meta.get("namespace")
    for o in meta.get("ownerReferences") or []:
        if o.get("controller"):
            return f"{ns}/{o.get('kind')}/{o.get('name')}"
    return f"{ns}/{meta.get('name')}"


def jobs_of(movable_pods: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """The jobs of a node's movable pods, each once, in order."""
    return tuple(dict.fromkeys(job_of(p) for p in movable_pods))


def node_state(node: str, obj: dict[str, Any], jobs: tuple[str, ...], me: str) -> NodeState:
    """A Node object (and the jobs of its movable pods) as ``NodeState``: cordoned or carrying
    our taint → DRAINING while pods remain, else DRAINED; Ready condition not True → DOWN;
    ``me`` is the asking backend's owner."""
    tag = owner_of(obj)
    ours = tag is not None
    cordoned = bool(obj.get("spec", {}).get("unschedulable"))
    out = cordoned or (ours and _owner.has_our_taint(obj))
    ready = [c for c in obj.get("status", {}).get("conditions") or [] if c.get("type") == "Ready"]
    if out:
        st = NodeSchedState.DRAINING if jobs else NodeSchedState.DRAINED
    elif ready and ready[0].get("status") != "True":
        st = NodeSchedState.DOWN
    else:
        st = NodeSchedState.AVAILABLE
    annotations = obj.get("metadata", {}).get("annotations") or {}
    reason = annotations.get(REASON_KEY) if ours else None
    return NodeState(node, st, reason=reason, ours=ours and out and owns(me, tag), jobs=jobs,
                     owner=tag if out else None)

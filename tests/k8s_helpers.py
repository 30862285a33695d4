"""Helpers for the tests that talk to the real kube-apiserver (fixture ``kubeconfig``)."""

from __future__ import annotations

from typing import Any

from minutiae.schedulers.kubernetes.config import KubeConfig, load_kubeconfig
from minutiae.schedulers.kubernetes.http import KubeAPIError, KubeClient

APPLY = "application/apply-patch+yaml"


def admin(kubeconfig: str, impersonate: str | None = None) -> KubeClient:
    return KubeClient(load_kubeconfig(kubeconfig), impersonate=impersonate)


def config(kubeconfig: str) -> KubeConfig:
    return load_kubeconfig(kubeconfig)


def create_node(api: KubeClient, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A fresh Node object (there is no kubelet: the object is all there is)."""
    delete(api, f"/api/v1/nodes/{name}")
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels or {"minutiae-test": "true"}}}
    return api.post("/api/v1/nodes", body)


def delete(api: KubeClient, path: str) -> None:
    """Delete now (grace period 0: there is no kubelet to confirm a graceful pod deletion)."""
    try:
        api.request("DELETE", path, ok=(200, 202), params={"gracePeriodSeconds": "0"})
    except KubeAPIError as exc:
        if exc.status != 404:
            raise


def admin_cordon(api: KubeClient, node: str) -> None:
    """What ``kubectl cordon`` does: spec.unschedulable and nothing else."""
    api.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})


def create_pod(api: KubeClient, ns: str, name: str, node: str, labels: dict[str, str],
               owner_daemonset: bool = False, job: str | None = None) -> dict[str, Any]:
    """A pod bound to ``node`` (Running); ``job``: owned by that batch/v1 Job (controller)."""
    delete(api, f"/api/v1/namespaces/{ns}/pods/{name}")
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels}
    if owner_daemonset:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds",
                                    "uid": "00000000-0000-0000-0000-000000000001"}]
    if job:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                    "uid": "00000000-0000-0000-0000-000000000002",
                                    "controller": True}]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}}
    api.post(f"/api/v1/namespaces/{ns}/pods", body)
    # no kubelet: report the pod Running ourselves (the Eviction API skips PDBs for Pending pods)
    return api.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": {"phase": "Running"}})


def ensure_namespace(api: KubeClient, ns: str) -> None:
    try:
        api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": ns}})
    except KubeAPIError as exc:
        if exc.status != 409:
            raise


def node_events(api: KubeClient, node: str, ns: str = "default") -> list[dict[str, Any]]:
    """Events about the current incarnation of ``node`` (by uid: names are reused across runs)."""
    uid = api.get(f"/api/v1/nodes/{node}")["metadata"]["uid"]
    body = api.get(f"/api/v1/namespaces/{ns}/events",
                   params={"fieldSelector": f"involvedObject.kind=Node,involvedObject.uid={uid}"})
    return list(body.get("items") or [])

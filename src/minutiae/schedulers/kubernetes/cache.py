"""Nodes and the jobs on them, kept current by list + watch (client-go's informer pattern), so a
reconcile step reads the fleet from memory instead of listing 5,000 Node objects.

Two threads (nodes; scheduled, unfinished pods), each: list (paged), then watch from the
list's ``resourceVersion`` (``allowWatchBookmarks``; the server ends a watch after
``timeoutSeconds``: watched again from the last version seen); a ``410 Gone`` or any error
lists again (after a backoff on errors). Until both have listed, :attr:`synced` is False and
the backend reads the API server directly.

Only what ``node_state`` needs is kept per node (name, resourceVersion, uid, minutiae's
annotations, ``unschedulable``, taints, the Ready condition and ours) and one job name per
movable pod: bounded memory at 100,000 nodes. Our own writes go in at once (:meth:`put`, from
the API server's answer), and an older version never replaces a newer one (an event still in
flight when we wrote), so the step after a drain sees the drain.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx

from minutiae.schedulers.kubernetes.nodes import job_of, movable
from minutiae.schedulers.kubernetes.owner import DOMAIN

__all__ = ["NodeCache", "slim"]

WATCH_S = 300
PAGE = 500
_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def slim(obj: dict[str, Any], condition: str) -> dict[str, Any]:
    """What the controller reads of a Node object (see the module docstring)."""
    meta = obj.get("metadata", {})
    ann = {k: v for k, v in (meta.get("annotations") or {}).items()
           if k.startswith(DOMAIN + "/")}
    spec = obj.get("spec", {})
    conds = [c for c in obj.get("status", {}).get("conditions") or []
             if c.get("type") in ("Ready", condition)]
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion"),
                         "uid": meta.get("uid"), "annotations": ann},
            "spec": {"unschedulable": spec.get("unschedulable"), "taints": spec.get("taints")},
            "status": {"conditions": conds}}


def _newer(a: str | None, b: str | None) -> bool:
    """Is version ``a`` newer than ``b``? (etcd's versions are integers; else: take ``a``)"""
    if a and b and a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return True


class NodeCache:
    def __init__(self, client: Callable[[], httpx.Client], condition: str,
                 backoff_s: float = 1.0) -> None:
        self._client = client
        self.condition = condition
        self.backoff_s = backoff_s
        self._mu = threading.Lock()
        self.nodes: dict[str, dict[str, Any]] = {}
        #: ``namespace/name`` → (node, job) of every movable pod
        self.pods: dict[str, tuple[str, str]] = {}
        self._listed: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        #: the last error of each watch (for the backend's messages)
        self.errors: dict[str, str] = {}

    @property
    def synced(self) -> bool:
        return self._listed >= {"nodes", "pods"} and not self._stop.is_set()

    def start(self) -> None:
        for kind in ("nodes", "pods"):
            t = threading.Thread(target=self._run, args=(kind,), name=f"minutiae-watch-{kind}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()

    # ---- reading -------------------------------------------------------------------------
    def node(self, name: str) -> dict[str, Any] | None:
        with self._mu:
            return self.nodes.get(name)

    def jobs(self) -> dict[str, tuple[str, ...]]:
        """node → the jobs of its movable pods (each once)."""
        out: dict[str, dict[str, None]] = {}
        with self._mu:
            for node, job in self.pods.values():
                out.setdefault(node, {})[job] = None
        return {n: tuple(js) for n, js in out.items()}

    def put(self, obj: dict[str, Any]) -> None:
        """A Node object the API server just returned to us (our own write)."""
        self._node_event("MODIFIED", obj)

    # ---- the watch threads ---------------------------------------------------------------
    def _run(self, kind: str) -> None:
        while not self._stop.is_set():
            try:
                with self._client() as c:
                    rv: str | None = self._list(c, kind)
                    while rv and not self._stop.is_set():
                        rv = self._watch(c, kind, rv)
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                self.errors[kind] = f"{type(exc).__name__}: {exc}"
                self._stop.wait(self.backoff_s)

    def _path(self, kind: str) -> tuple[str, dict[str, str]]:
        return ("/api/v1/nodes", {}) if kind == "nodes" else (
            "/api/v1/pods", {"fieldSelector": _PODS})

    def _list(self, c: httpx.Client, kind: str) -> str:
        path, q = self._path(kind)
        items: list[dict[str, Any]] = []
        params = {**q, "limit": str(PAGE)}
        while True:
            r = c.get(path, params=params)
            r.raise_for_status()
            body = r.json()
            items.extend(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                break
            params = {**params, "continue": str(token)}
        with self._mu:
            if kind == "nodes":
                self.nodes = {o["metadata"]["name"]: slim(o, self.condition) for o in items}
            else:
                self.pods = {}
                for p in items:
                    self._pod_locked("ADDED", p)
            self._listed.add(kind)
        return str(body["metadata"]["resourceVersion"])

    def _watch(self, c: httpx.Client, kind: str, rv: str) -> str | None:
        """One watch from ``rv``; returns the version to watch from next (None: list again)."""
        path, q = self._path(kind)
        params = {**q, "watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(WATCH_S)}
        with c.stream("GET", path, params=params, timeout=httpx.Timeout(
                10.0, read=WATCH_S + 30.0)) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if self._stop.is_set():
                    return None
                if not line:
                    continue
                ev = json.loads(line)
                obj = ev.get("object") or {}
                if ev.get("type") == "ERROR":      # 410 Gone: too old, list again
                    return None
                rv = obj.get("metadata", {}).get("resourceVersion") or rv
                if ev.get("type") == "BOOKMARK":
                    continue
                if kind == "nodes":
                    self._node_event(str(ev.get("type")), obj)
                else:
                    with self._mu:
                        self._pod_locked(str(ev.get("type")), obj)
        return rv

    def _node_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name")
        if not isinstance(name, str):
            return
        with self._mu:
            if kind == "DELETED":
                self.nodes.pop(name, None)
                return
            have = self.nodes.get(name)
            rv = obj.get("metadata", {}).get("resourceVersion")
            if have is None or _newer(rv, have["metadata"].get("resourceVersion")):
                self.nodes[name] = slim(obj, self.condition)

    def _pod_locked(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata", {})
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        node = pod.get("spec", {}).get("nodeName")
        if kind == "DELETED" or not node or not movable(pod):
            self.pods.pop(key, None)
        else:
            self.pods[key] = (str(node), job_of(pod))

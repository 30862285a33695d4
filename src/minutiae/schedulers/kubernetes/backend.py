"""``SchedulerBackend`` for Kubernetes, through the API server with httpx.

A drain is, on the Node object:

- ``spec.unschedulable: true`` (what ``kubectl cordon`` does) and a ``minutiae.io/unhealthy``
  ``NoSchedule`` taint (kept even if someone runs ``kubectl uncordon`` by hand);
- ownership annotations ``minutiae.io/cordoned-by: <owner>`` (``kubernetes/owner.py``), ``…/reason``,
  ``…/since``: resume only undoes a cordon of its own owner, never an admin's or the other path's;
- a node condition ``MinutiaeUnhealthy`` (node-problem-detector style, written to the ``status``
  subresource with a strategic merge patch) whose message is the reason;
- an Event on the node (``kubectl describe node`` shows it);
- optionally the eviction of the node's pods through the Eviction API, which honours
  PodDisruptionBudgets: a 429 means "not now", the pod stays and is reported as held.

Spec and annotation changes are JSON merge patches carrying ``metadata.resourceVersion``, so a
concurrent edit (an admin cordoning at the same moment) makes the write fail with 409 and it is
re-read, never overwritten. Every operation is idempotent.
"""

from __future__ import annotations

import logging
import time as _time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from minutiae.clock import Clock, SystemClock
from minutiae.errors import BackendError, ValidationError
from minutiae.schedulers.base import (
    DEFAULT_OWNER,
    BackendOptions,
    NodeState,
    make_reason,
    owns,
    validate_node,
    validate_owner,
)
from minutiae.schedulers.kubernetes import owner as _owner
from minutiae.schedulers.kubernetes.cache import NodeCache
from minutiae.schedulers.kubernetes.config import KubeConfig, load_in_cluster, load_kubeconfig
from minutiae.schedulers.kubernetes.http import STRATEGIC, KubeAPIError, KubeClient
from minutiae.schedulers.kubernetes.nodes import jobs_of, movable, node_state
from minutiae.schedulers.kubernetes.owner import (
    DOMAIN,
    OWNER_KEY,
    REASON_KEY,
    SINCE_KEY,
    TAINT_KEY,
    owner_of,
)

log = logging.getLogger("minutiae.kubernetes")
CONDITION = "MinutiaeUnhealthy"
_CONFLICT_RETRIES = 5
LIST_PAGE = 500
_KEY_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def rfc3339(epoch: float) -> str:
    return _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime(epoch))


def annotation_key(key: str) -> str:
    """A valid annotation key; a bare name goes under ``minutiae.io/``."""
    prefix, _, name = key.rpartition("/")
    if not prefix:
        prefix = DOMAIN
    if (not name or len(name) > 63 or not set(name) <= _KEY_OK or not name[0].isalnum()
            or not name[-1].isalnum() or len(prefix) > 253
            or not set(prefix) <= _KEY_OK - {"_"} or not prefix[0].isalnum()):
        raise ValidationError(f"invalid annotation key {key!r}")
    return f"{prefix}/{name}"


@dataclass(frozen=True, slots=True)
class EvictionReport:
    """What evicting a node's pods did: ``evicted`` pods were accepted by the Eviction API;
    ``held`` were refused with 429 (a PodDisruptionBudget allows no disruption now: retry
    later, the node stays cordoned); ``failed`` were refused for another reason. Names are
    ``namespace/name``; held and failed carry the API server's message."""

    node: str
    evicted: tuple[str, ...] = ()
    held: tuple[tuple[str, str], ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.held and not self.failed


@dataclass
class KubernetesBackend:
    """Drain/resume/annotate/state through the Kubernetes API (see the module docstring).

    ``evict``: also evict the node's movable pods on drain (PDB-aware); reports are kept in
    ``evictions`` by node. ``event_namespace``: where Node events are written.
    """

    config: KubeConfig
    clock: Clock
    evict: bool = False
    #: the owner tag written into ``cordoned-by`` (``<cluster>/<controller>`` or ``hcp``)
    owner: str = DEFAULT_OWNER
    event_namespace: str = "default"
    impersonate: str | None = None
    transport: httpx.BaseTransport | None = None
    timeout: float = 10.0
    #: keep nodes and jobs by list + watch (``kubernetes/cache.py``): a step reads memory
    watch: bool = False
    name: str = "kubernetes"
    evictions: dict[str, EvictionReport] = field(default_factory=dict)
    _client: KubeClient | None = field(default=None, repr=False)
    _eviction_version: str | None = field(default=None, repr=False)
    _cache: NodeCache | None = field(default=None, repr=False)

    @classmethod
    def create(cls, opts: BackendOptions) -> KubernetesBackend:
        """From ``opts.kubeconfig`` when given, else the in-cluster service account."""
        clock = opts.clock or SystemClock()
        owner = validate_owner(opts.owner or DEFAULT_OWNER)
        if opts.kubeconfig:
            return cls.from_kubeconfig(opts.kubeconfig, clock, evict=opts.evict, owner=owner,
                                       watch=True)
        return cls.in_cluster(clock, evict=opts.evict, owner=owner, watch=True)

    undo_hint = staticmethod(_owner.undo_hint)

    def _mine(self, obj: dict[str, Any]) -> bool:
        return owns(self.owner, owner_of(obj))

    @classmethod
    def from_kubeconfig(cls, path: str, clock: Clock, context: str | None = None,
                        **kw: Any) -> KubernetesBackend:
        return cls(load_kubeconfig(path, context), clock, **kw)

    @classmethod
    def in_cluster(cls, clock: Clock, root: str = "/", **kw: Any) -> KubernetesBackend:
        return cls(load_in_cluster(root), clock, **kw)

    @property
    def api(self) -> KubeClient:
        if self._client is None:
            self._client = KubeClient(self.config, impersonate=self.impersonate,
                                      transport=self.transport, timeout=self.timeout)
        return self._client

    def close(self) -> None:
        if self._cache is not None:
            self._cache.stop()
            self._cache = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- reading ---------------------------------------------------------------------------
    def _node(self, node: str) -> dict[str, Any]:
        validate_node(node)
        try:
            return self.api.get(f"/api/v1/nodes/{node}")
        except KubeAPIError as exc:
            if exc.status == 404:
                raise BackendError(f"kubernetes: unknown node {node}") from None
            raise

    def _list(self, path: str, params: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Every item of a collection, in pages of ``LIST_PAGE`` (``limit``/``continue``)."""
        items: list[dict[str, Any]] = []
        q = {**(params or {}), "limit": str(LIST_PAGE)}
        while True:
            body = self.api.get(path, params=q)
            items.extend(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items
            q = {**q, "continue": str(token)}

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        validate_node(node)
        return self._list("/api/v1/pods", {"fieldSelector": f"spec.nodeName={node}"})

    def state(self, node: str) -> NodeState:
        obj = self._node(node)
        return node_state(node, obj, jobs_of(p for p in self.pods_on(node) if movable(p)),
                          self.owner)

    def _synced(self) -> NodeCache | None:
        """The watch cache once it has listed (started on first use with ``watch``)."""
        if not self.watch:
            return None
        if self._cache is None:
            self._cache = NodeCache(self.api.streaming, CONDITION)
            self._cache.start()
        return self._cache if self._cache.synced else None

    def states(self, nodes: Sequence[str]) -> dict[str, NodeState]:
        """Bulk ``state`` (the controller uses it when present): from the watch cache, else
        one node list and one pod list for the whole fleet. Nodes the API server does not
        know are left out."""
        wanted = {validate_node(n) for n in nodes}
        cache = self._synced()
        if cache is not None:
            jobs = cache.jobs()
            return {n: node_state(n, obj, jobs.get(n, ()), self.owner) for n in wanted
                    if (obj := cache.node(n)) is not None}
        items = self._list("/api/v1/nodes")
        pods = self._list("/api/v1/pods", {
            "fieldSelector": "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"})
        by_node: dict[str, list[dict[str, Any]]] = {}
        for p in pods:
            if movable(p):
                by_node.setdefault(str(p.get("spec", {}).get("nodeName")), []).append(p)
        out: dict[str, NodeState] = {}
        for obj in items:
            name = str(obj.get("metadata", {}).get("name"))
            if name in wanted:
                out[name] = node_state(name, obj, jobs_of(by_node.get(name, [])), self.owner)
        return out

    # -- writing ---------------------------------------------------------------------------
    def _merge(self, node: str, build: Callable[[dict[str, Any]], dict[str, Any] | None]
               ) -> dict[str, Any]:
        """Read-modify-write with the resourceVersion precondition; ``build(obj)`` returns the
        merge patch or None for "nothing to do". The first read may come from the watch cache
        (a stale one fails the precondition: 409, read again); a decision *not* to write is
        only taken on a fresh read. Returns the Node as it now is."""
        cache = self._synced()
        obj = cache.node(node) if cache is not None else None
        fresh = obj is None
        for _ in range(_CONFLICT_RETRIES):
            if obj is None:
                obj = self._node(node)
            try:
                patch = build(obj)
            except BackendError:
                if fresh:
                    raise
                patch = None
            if patch is None:
                if fresh:
                    return obj
                obj, fresh = None, True
                continue
            patch.setdefault("metadata", {})["resourceVersion"] = obj["metadata"]["resourceVersion"]
            try:
                got = self.api.patch(f"/api/v1/nodes/{node}", patch)
            except KubeAPIError as exc:
                if exc.status == 409:
                    obj, fresh = None, True
                    continue
                raise
            if cache is not None:
                cache.put(got)
            return got
        raise BackendError(f"kubernetes: node {node} kept changing under us (409 x{_CONFLICT_RETRIES})")

    def _sync_condition(self, obj: dict[str, Any], active: bool, reason: str, message: str,
                        event_reason: str, event_text: str, event_type: str) -> None:
        """Set our node condition on ``obj`` (the Node as just read or written) if it differs;
        an Event marks each change (so a retry after a failure finishes the job and a repeat
        writes nothing)."""
        node = str(obj["metadata"]["name"])
        cur = [c for c in obj.get("status", {}).get("conditions") or [] if c.get("type") == CONDITION]
        want = "True" if active else "False"
        if cur and cur[0].get("status") == want and cur[0].get("message") == message:
            return
        if not cur and not active:
            return  # never drained by us: nothing to clear
        now = rfc3339(self.clock.now())
        since = cur[0].get("lastTransitionTime") if cur and cur[0].get("status") == want else now
        cond = {"type": CONDITION, "status": want, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": since or now}
        got = self.api.patch(f"/api/v1/nodes/{node}/status", {"status": {"conditions": [cond]}},
                             content_type=STRATEGIC)
        if self._cache is not None:
            self._cache.put(got)
        self._event(node, str(obj["metadata"].get("uid", "")), event_reason, event_text, event_type)

    def _event(self, node: str, uid: str, reason: str, message: str, kind: str) -> None:
        now = self.clock.now()
        ts = rfc3339(now)
        ns = self.event_namespace
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{node}.{int(now * 1e6):x}.{uuid.uuid4().hex[:8]}",
                         "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid},
            "reason": reason, "message": message, "type": kind,
            "source": {"component": "minutiae"},
            "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
        }
        self.api.post(f"/api/v1/namespaces/{quote(ns, safe='')}/events", body)

    def drain(self, node: str, reason: str) -> None:
        text = make_reason(reason, self.owner)
        since = rfc3339(self.clock.now())

        def build(obj: dict[str, Any]) -> dict[str, Any] | None:
            cordoned = bool(obj.get("spec", {}).get("unschedulable"))
            ours = self._mine(obj)
            if (cordoned or owner_of(obj)) and not ours:
                return None  # an admin's (or the other minutiae path's) cordon: leave it alone
            ann = obj.get("metadata", {}).get("annotations") or {}
            if cordoned and ours and _owner.has_our_taint(obj) and ann.get(REASON_KEY) == text:
                return None  # already done
            taints = _owner.taints(obj)
            if not _owner.has_our_taint(obj):
                taints.append({"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"})
            return {"metadata": {"annotations": {OWNER_KEY: self.owner, REASON_KEY: text,
                                                 SINCE_KEY: ann.get(SINCE_KEY) or since}},
                    "spec": {"unschedulable": True, "taints": taints}}

        obj = self._merge(node, build)
        if not self._mine(obj):
            return  # an admin's cordon
        self._sync_condition(obj, True, "MinutiaeDrain", text, "MinutiaeCordon",
                             f"cordoned and tainted {TAINT_KEY}: {text}", "Warning")
        if self.evict:
            rep = self.evictions[node] = self.evict_pods(node)
            for pod, why in (*rep.held, *rep.failed):
                log.warning("kubernetes: %s: pod %s not evicted: %s", node, pod, why)

    def resume(self, node: str) -> None:
        def build(obj: dict[str, Any]) -> dict[str, Any] | None:
            cordoned = bool(obj.get("spec", {}).get("unschedulable"))
            ours = self._mine(obj)
            if (cordoned or owner_of(obj)) and not ours:
                raise BackendError(f"kubernetes: refusing to uncordon {node}: the cordon is not "
                                   f"ours (no {OWNER_KEY}: {self.owner} annotation)")
            if not ours and not _owner.has_our_taint(obj):
                return None  # nothing of ours on it
            spec: dict[str, Any] = {"taints": [t for t in _owner.taints(obj) if t.get("key") != TAINT_KEY]}
            if cordoned:
                spec["unschedulable"] = None
            return {"metadata": {"annotations": {OWNER_KEY: None, REASON_KEY: None, SINCE_KEY: None}},
                    "spec": spec}

        obj = self._merge(node, build)
        self._sync_condition(obj, False, "MinutiaeResumed", "returned to service by minutiae",
                             "MinutiaeUncordon", "uncordoned and untainted by minutiae", "Normal")

    def annotate(self, node: str, key: str, value: str) -> None:
        k = annotation_key(key)
        validate_node(node)

        def build(obj: dict[str, Any]) -> dict[str, Any] | None:
            if (obj.get("metadata", {}).get("annotations") or {}).get(k) == value:
                return None
            return {"metadata": {"annotations": {k: str(value)}}}

        self._merge(node, build)

    # -- eviction --------------------------------------------------------------------------
    def _eviction_api(self) -> str:
        if self._eviction_version is None:
            # policy/v1 Eviction from Kubernetes 1.22; older servers take policy/v1beta1
            self._eviction_version = "policy/v1" if self.api.exists("/apis/policy/v1") else "policy/v1beta1"
        return self._eviction_version

    def evict_pods(self, node: str) -> EvictionReport:
        """Ask the Eviction API to move every movable pod off ``node`` (PDB-respecting)."""
        evicted: list[str] = []
        held: list[tuple[str, str]] = []
        failed: list[tuple[str, str]] = []
        skipped: list[str] = []
        version = self._eviction_api()
        for pod in self.pods_on(node):
            meta = pod.get("metadata", {})
            ns, name = str(meta.get("namespace")), str(meta.get("name"))
            ref = f"{ns}/{name}"
            if not movable(pod):
                skipped.append(ref)
                continue
            body = {"apiVersion": version, "kind": "Eviction",
                    "metadata": {"name": name, "namespace": ns}}
            try:
                self.api.post(f"/api/v1/namespaces/{quote(ns, safe='')}/pods/{quote(name, safe='')}"
                              "/eviction", body)
            except KubeAPIError as exc:
                if exc.status == 429:
                    held.append((ref, str(exc)))
                elif exc.status == 404:
                    skipped.append(ref)  # already gone
                else:
                    failed.append((ref, str(exc)))
                continue
            evicted.append(ref)
        return EvictionReport(node, tuple(evicted), tuple(held), tuple(failed), tuple(skipped))

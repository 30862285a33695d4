"""KubernetesBackend against the real kube-apiserver (fixture ``kubeconfig``): what exactly lands
on the Node object, ownership, conflicts, events and PDB-aware eviction."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from k8s_helpers import (
    admin,
    admin_cordon,
    config,
    create_node,
    create_pod,
    delete,
    ensure_namespace,
    node_events,
)
from minutiae.errors import BackendError
from minutiae.schedulers.base import DEFAULT_OWNER, NodeSchedState
from minutiae.schedulers.kubernetes.backend import (
    CONDITION,
    OWNER_KEY,
    REASON_KEY,
    SINCE_KEY,
    TAINT_KEY,
    KubernetesBackend,
)
from minutiae.schedulers.kubernetes.config import KubeConfig
from minutiae.schedulers.kubernetes.http import KubeClient
from minutiae.testing import FakeClock

pytestmark = pytest.mark.k8s
NS = "mk-backend"


@pytest.fixture()
def api(kubeconfig: str) -> Iterator[KubeClient]:
    c = admin(kubeconfig)
    ensure_namespace(c, NS)
    yield c
    c.close()


@pytest.fixture()
def backend(kubeconfig: str) -> Iterator[KubernetesBackend]:
    be = KubernetesBackend(config(kubeconfig), FakeClock(start=1_780_000_000.0))
    yield be
    be.close()


def test_drain_writes_cordon_taint_annotations_condition_and_one_event(
        api: KubeClient, backend: KubernetesBackend) -> None:
    node = "mk-be-01"
    create_node(api, node)
    api.patch(f"/api/v1/nodes/{node}", {"spec": {"taints": [
        {"key": "site/maintenance-window", "value": "sun", "effect": "PreferNoSchedule"}]}})
    backend.drain(node, "xid 79: GPU has fallen off the bus (gpu 0000:18:00.0)")
    obj = api.get(f"/api/v1/nodes/{node}")
    assert obj["spec"]["unschedulable"] is True
    assert {(t["key"], t["effect"]) for t in obj["spec"]["taints"]} == {
        ("site/maintenance-window", "PreferNoSchedule"), (TAINT_KEY, "NoSchedule")}
    ann = obj["metadata"]["annotations"]
    assert ann[OWNER_KEY] == DEFAULT_OWNER
    assert ann[REASON_KEY] == f"minutiae[{DEFAULT_OWNER}]: xid 79: GPU has fallen off the bus (gpu 0000:18:00.0)"
    assert ann[SINCE_KEY] == "2026-05-28T20:26:40Z"
    cond = [c for c in obj["status"]["conditions"] if c["type"] == CONDITION]
    assert len(cond) == 1 and cond[0]["status"] == "True" and cond[0]["reason"] == "MinutiaeDrain"
    assert cond[0]["message"] == ann[REASON_KEY]
    assert cond[0]["lastTransitionTime"] == "2026-05-28T20:26:40Z"
    events = node_events(api, node)
    assert [(e["reason"], e["type"]) for e in events] == [("MinutiaeCordon", "Warning")]
    assert events[0]["involvedObject"]["uid"] == obj["metadata"]["uid"]
    st = backend.state(node)
    assert (st.state, st.ours, st.reason) == (NodeSchedState.DRAINED, True, ann[REASON_KEY])

    # idempotent: the same drain again writes nothing (resourceVersion and events unchanged)
    rv = obj["metadata"]["resourceVersion"]
    backend.drain(node, "xid 79: GPU has fallen off the bus (gpu 0000:18:00.0)")
    assert api.get(f"/api/v1/nodes/{node}")["metadata"]["resourceVersion"] == rv
    assert len(node_events(api, node)) == 1

    # resume removes only what is ours: the site's taint stays, the condition turns False
    backend.resume(node)
    obj = api.get(f"/api/v1/nodes/{node}")
    assert "unschedulable" not in obj["spec"]
    assert [t["key"] for t in obj["spec"]["taints"]] == ["site/maintenance-window"]
    assert not {OWNER_KEY, REASON_KEY, SINCE_KEY} & set(obj["metadata"].get("annotations") or {})
    cond = [c for c in obj["status"]["conditions"] if c["type"] == CONDITION]
    assert cond[0]["status"] == "False" and cond[0]["reason"] == "MinutiaeResumed"
    assert sorted(e["reason"] for e in node_events(api, node)) == ["MinutiaeCordon",
                                                                   "MinutiaeUncordon"]
    backend.resume(node)  # nothing of ours left: a no-op, no new event
    assert len(node_events(api, node)) == 2
    assert backend.state(node).state is NodeSchedState.AVAILABLE
    delete(api, f"/api/v1/nodes/{node}")


def test_admin_cordon_is_never_touched(api: KubeClient, backend: KubernetesBackend) -> None:
    node = "mk-be-02"
    create_node(api, node)
    admin_cordon(api, node)
    rv = api.get(f"/api/v1/nodes/{node}")["metadata"]["resourceVersion"]
    backend.drain(node, "ecc dbe")
    obj = api.get(f"/api/v1/nodes/{node}")
    assert obj["metadata"]["resourceVersion"] == rv  # not a byte written
    st = backend.state(node)
    assert st.state is NodeSchedState.DRAINED and not st.ours and st.reason is None
    with pytest.raises(BackendError, match="refusing to uncordon mk-be-02: the cordon is not ours"):
        backend.resume(node)
    assert api.get(f"/api/v1/nodes/{node}")["spec"]["unschedulable"] is True
    delete(api, f"/api/v1/nodes/{node}")


def test_hand_uncordon_leaves_our_taint_and_resume_cleans_it(
        api: KubeClient, backend: KubernetesBackend) -> None:
    node = "mk-be-03"
    create_node(api, node)
    backend.drain(node, "nvlink down")
    api.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": None}})  # kubectl uncordon
    st = backend.state(node)
    assert st.state is NodeSchedState.DRAINED and st.ours  # the NoSchedule taint still holds
    backend.resume(node)
    obj = api.get(f"/api/v1/nodes/{node}")
    # the API server's own node.kubernetes.io/not-ready taint (no kubelet here) is left alone
    assert [t["key"] for t in obj["spec"]["taints"]] == ["node.kubernetes.io/not-ready"]
    assert not obj["spec"].get("unschedulable")
    delete(api, f"/api/v1/nodes/{node}")


def test_new_reason_updates_annotation_keeps_since(api: KubeClient, kubeconfig: str) -> None:
    node = "mk-be-04"
    create_node(api, node)
    clock = FakeClock(start=1_780_000_000.0)
    be = KubernetesBackend(config(kubeconfig), clock)
    be.drain(node, "reset_gpu: xid 48")
    clock.advance(3600)
    be.drain(node, "reboot: still failing after reset")
    ann = api.get(f"/api/v1/nodes/{node}")["metadata"]["annotations"]
    assert ann[REASON_KEY] == f"minutiae[{DEFAULT_OWNER}]: reboot: still failing after reset"
    assert ann[SINCE_KEY] == "2026-05-28T20:26:40Z"
    be.close()
    delete(api, f"/api/v1/nodes/{node}")


def test_eviction_respects_pod_disruption_budgets(api: KubeClient, kubeconfig: str) -> None:
    node = "mk-be-05"
    create_node(api, node)
    create_pod(api, NS, "trainer-0", node, {"app": "trainer"})
    create_pod(api, NS, "notebook", node, {"app": "notebook"})
    create_pod(api, NS, "agent-x", node, {"app": "agent"}, owner_daemonset=True)
    # A PDB that allows no disruption (no controller-manager here computes its status, so the
    # API server treats it as allowing none: the Eviction API must answer 429 for trainer-0)
    pdb_version = "policy/v1" if _has(api, "/apis/policy/v1") else "policy/v1beta1"
    delete(api, f"/apis/{pdb_version}/namespaces/{NS}/poddisruptionbudgets/trainer")
    api.post(f"/apis/{pdb_version}/namespaces/{NS}/poddisruptionbudgets", {
        "apiVersion": pdb_version, "kind": "PodDisruptionBudget",
        "metadata": {"name": "trainer", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}}})
    be = KubernetesBackend(config(kubeconfig), FakeClock(), evict=True)
    be.drain(node, "row remap failure")
    rep = be.evictions[node]
    assert rep.evicted == (f"{NS}/notebook",)
    assert [p for p, _ in rep.held] == [f"{NS}/trainer-0"]
    assert "disruption budget" in rep.held[0][1]
    assert rep.skipped == (f"{NS}/agent-x",) and not rep.complete
    st = be.state(node)
    # the held pod keeps the node DRAINING (Slurm's word for "cordoned, work still running")
    assert st.state is NodeSchedState.DRAINING and st.jobs == (f"{NS}/trainer-0",)
    be.close()
    for p in ("trainer-0", "notebook", "agent-x"):
        delete(api, f"/api/v1/namespaces/{NS}/pods/{p}")
    delete(api, f"/apis/{pdb_version}/namespaces/{NS}/poddisruptionbudgets/trainer")
    delete(api, f"/api/v1/nodes/{node}")


def test_unknown_node_and_bad_token(api: KubeClient, kubeconfig: str,
                                    backend: KubernetesBackend) -> None:
    with pytest.raises(BackendError, match="unknown node mk-be-nope"):
        backend.state("mk-be-nope")
    cfg = config(kubeconfig)
    bad = KubernetesBackend(KubeConfig(server=cfg.server, token="wrong", verify=cfg.verify),
                            FakeClock())
    with pytest.raises(BackendError, match="unauthorised"):
        bad.state("mk-be-nope")
    bad.close()


def _has(api: KubeClient, path: str) -> bool:
    return api.exists(path)


def test_bulk_states_equal_one_by_one(api: KubeClient, backend: KubernetesBackend,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import minutiae.schedulers.kubernetes.backend as k8s_backend

    monkeypatch.setattr(k8s_backend, "LIST_PAGE", 1)  # every list goes through `continue` pages
    nodes = ["mk-be-10", "mk-be-11", "mk-be-12"]
    for n in nodes:
        create_node(api, n)
    backend.drain("mk-be-10", "xid 79")
    admin_cordon(api, "mk-be-11")
    create_pod(api, NS, "job-a", "mk-be-11", {"app": "job"})
    bulk = backend.states([*nodes, "mk-be-not-there"])
    assert bulk == {n: backend.state(n) for n in nodes}
    assert [bulk[n].state for n in nodes] == [NodeSchedState.DRAINED, NodeSchedState.DRAINING,
                                              NodeSchedState.AVAILABLE]
    assert bulk["mk-be-11"].jobs == (f"{NS}/job-a",) and not bulk["mk-be-11"].ours
    delete(api, f"/api/v1/namespaces/{NS}/pods/job-a")
    for n in nodes:
        delete(api, f"/api/v1/nodes/{n}")


class _Counting(httpx.HTTPTransport):
    """Counts the backend's requests by method and resource (the watch's own client is apart)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.n: Counter[str] = Counter()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        p = request.url.path
        what = "status" if p.endswith("/status") else "events" if "/events" in p else (
            "pods" if "/pods" in p else "node")
        self.n[f"{request.method} {what}"] += 1
        return super().handle_request(request)


def _until(what: str, fn: Callable[[], bool], timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while not fn():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_watch_cache_reads_the_fleet_from_memory_and_a_drain_is_three_writes(
        api: KubeClient, kubeconfig: str) -> None:
    """With ``watch`` (what ``serve`` uses) states come from a list + watch cache: equal to the
    direct reads, an admin's cordon seen within seconds, our own drain seen at once; a drain
    is exactly three requests (cordon + taint + annotations, the condition, the event) and a
    repeated one writes nothing."""
    nodes = ["mk-wc-1", "mk-wc-2", "mk-wc-3"]
    for n in nodes:
        create_node(api, n)
    create_pod(api, NS, "wc-job", "mk-wc-3", {"app": "job"}, job="train")
    cfg = config(kubeconfig)
    count = _Counting(verify=cfg.verify, cert=cfg.cert)
    be = KubernetesBackend(cfg, FakeClock(start=1_780_000_000.0), watch=True, transport=count)
    plain = KubernetesBackend(cfg, FakeClock(start=1_780_000_000.0))
    try:
        _until("the cache to list", lambda: be.states(nodes) != {} and be._synced() is not None)
        _until("the pod in the cache", lambda: be.states(nodes)["mk-wc-3"].jobs != ())
        assert be.states([*nodes, "mk-wc-none"]) == plain.states(nodes)
        count.n.clear()
        be.drain("mk-wc-1", "xid 79")
        assert count.n == {"PATCH node": 1, "PATCH status": 1, "POST events": 1}, count.n
        assert be.states(["mk-wc-1"])["mk-wc-1"].state is NodeSchedState.DRAINED  # at once
        count.n.clear()
        be.drain("mk-wc-1", "xid 79")          # the same again: one fresh read, no write
        assert count.n == {"GET node": 1}, count.n
        admin_cordon(api, "mk-wc-2")
        _until("the admin's cordon", lambda: be.states(["mk-wc-2"])["mk-wc-2"].state
               is NodeSchedState.DRAINED)
        assert not be.states(["mk-wc-2"])["mk-wc-2"].ours
        count.n.clear()
        be.drain("mk-wc-2", "xid 79")          # never over an admin's cordon
        assert set(count.n) == {"GET node"}
        assert be.states(nodes) == plain.states(nodes)
    finally:
        be.close()
        plain.close()
        delete(api, f"/api/v1/namespaces/{NS}/pods/wc-job")
        for n in nodes:
            delete(api, f"/api/v1/nodes/{n}")

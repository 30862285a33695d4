"""deploy/kubernetes: the manifests are what we say they are, apply cleanly to a real
kube-apiserver (server-side apply; every field we wrote survives the round trip, so no field is
misspelt or dropped), and the shipped RBAC is enough for the backend and no more (checked by
impersonating the ServiceAccounts against the API server's RBAC authoriser)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s_helpers import APPLY, admin, config, create_node, create_pod, delete, ensure_namespace
from minutiae.controller.policy import loads_policy
from minutiae.errors import BackendError
from minutiae.schedulers.kubernetes.backend import TAINT_KEY, KubernetesBackend
from minutiae.schedulers.kubernetes.http import KubeAPIError, KubeClient
from minutiae.testing import FakeClock

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
FILES = ["namespace.yaml", "rbac.yaml", "controller.yaml", "agent-daemonset.yaml"]
CONTROLLER_SA = "system:serviceaccount:minutiae:minutiae-controller"
AGENT_SA = "system:serviceaccount:minutiae:minutiae-agent"


def docs() -> list[dict[str, Any]]:
    out = []
    for f in FILES:
        out.extend(d for d in yaml.safe_load_all((DEPLOY / f).read_text()) if d)
    return out


def by_kind(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


# -- static checks ---------------------------------------------------------------------------

def test_kustomization_lists_every_manifest() -> None:
    k = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert sorted(k["resources"]) == sorted(FILES)
    assert sorted(p.name for p in DEPLOY.glob("*.yaml")) == sorted([*FILES, "kustomization.yaml"])


def test_controller_role_has_exactly_the_verbs_the_backend_uses() -> None:
    role = by_kind("ClusterRole", "minutiae-controller")
    got = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
           for r in rule["resources"] for v in rule["verbs"]}
    assert got == {("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "patch"),
                   ("", "nodes/status", "patch"), ("", "events", "create"),
                   ("", "pods", "list"), ("", "pods/eviction", "create")}
    binding = by_kind("ClusterRoleBinding", "minutiae-controller")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "minutiae-controller",
                                    "namespace": "minutiae"}]
    # the agent has no role: nothing binds its ServiceAccount and it mounts no token
    assert not [d for d in docs() if d["kind"].endswith("Binding")
                and any(s["name"] == "minutiae-agent" for s in d["subjects"])]
    assert by_kind("DaemonSet")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_agent_survives_our_own_taint_and_is_scraped() -> None:
    pod = by_kind("DaemonSet")["spec"]["template"]
    tolerations = pod["spec"]["tolerations"]
    # `operator: Exists` without a key tolerates every taint, minutiae.io/unhealthy included
    assert any(t.get("operator") == "Exists" and "key" not in t for t in tolerations) or any(
        t.get("key") == TAINT_KEY for t in tolerations)
    ann = pod["metadata"]["annotations"]
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == str(port)
    svc = by_kind("Service", "minutiae-controller")
    assert svc["metadata"]["annotations"]["prometheus.io/scrape"] == "true"


def test_shipped_policy_in_configmap_validates() -> None:
    cm = by_kind("ConfigMap", "minutiae-policy")
    policy = loads_policy(cm["data"]["policy.toml"], "controller.yaml:minutiae-policy")
    assert policy.dry_run is True
    assert [r.name for r in policy.rules] == ["needs-remediation", "everything-else-notifies"]


# -- against the real API server ---------------------------------------------------------------

def _paths(api: KubeClient) -> dict[tuple[str, str], tuple[str, bool]]:
    """(apiVersion, kind) -> (collection prefix, namespaced), from API discovery."""
    out: dict[tuple[str, str], tuple[str, bool]] = {}
    for gv in sorted({d["apiVersion"] for d in docs()}):
        prefix = "/api/v1" if gv == "v1" else f"/apis/{gv}"
        for res in api.get(prefix)["resources"]:
            if "/" not in res["name"]:
                out[(gv, res["kind"])] = (f"{prefix}/{res['name']}", res["namespaced"])
    return out


def _url(paths: dict[tuple[str, str], tuple[str, bool]], d: dict[str, Any]) -> str:
    coll, namespaced = paths[(d["apiVersion"], d["kind"])]
    if namespaced:
        gv_prefix, plural = coll.rsplit("/", 1)
        return f"{gv_prefix}/namespaces/{d['metadata']['namespace']}/{plural}/{d['metadata']['name']}"
    return f"{coll}/{d['metadata']['name']}"


def _subset(want: Any, got: Any, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: expected a mapping, got {got!r}"
        for k, v in want.items():
            assert k in got, f"{where}.{k} was dropped by the API server (misspelt field?)"
            _subset(v, got[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r}"
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            _subset(w, g, f"{where}[{i}]")
    else:
        assert want == got, f"{where}: wrote {want!r}, server has {got!r}"


@pytest.fixture(scope="module")
def applied(kubeconfig: str) -> KubeClient:
    api = admin(kubeconfig)
    paths = _paths(api)
    for d in docs():
        api.request("PATCH", _url(paths, d), json=d, content_type=APPLY,
                    params={"fieldManager": "minutiae-test", "force": "true"})
    return api


@pytest.mark.k8s
def test_manifests_apply_and_round_trip(applied: KubeClient) -> None:
    paths = _paths(applied)
    for d in docs():
        got = applied.get(_url(paths, d))
        _subset(d, got, f"{d['kind']}/{d['metadata']['name']}")
    # applying again is a no-op (server-side apply is idempotent: generation does not move)
    ds = by_kind("DaemonSet")
    before = applied.get(_url(paths, ds))["metadata"]["generation"]
    applied.request("PATCH", _url(paths, ds), json=ds, content_type=APPLY,
                    params={"fieldManager": "minutiae-test", "force": "true"})
    assert applied.get(_url(paths, ds))["metadata"]["generation"] == before


@pytest.mark.k8s
def test_server_rejects_a_broken_manifest(applied: KubeClient) -> None:
    """The round-trip check above is only meaningful if the server validates: it does."""
    paths = _paths(applied)
    bad = by_kind("DaemonSet")
    bad["spec"]["template"]["metadata"]["labels"] = {"app.kubernetes.io/name": "other"}
    with pytest.raises(KubeAPIError) as err:
        applied.request("PATCH", _url(paths, bad), json=bad, content_type=APPLY,
                        params={"fieldManager": "minutiae-test", "force": "true", "dryRun": "All"})
    assert err.value.status == 422 and "selector" in str(err.value)


@pytest.mark.k8s
def test_controller_serviceaccount_can_do_the_whole_drain_and_nothing_else(
        applied: KubeClient, kubeconfig: str) -> None:
    node = "mk-rbac-01"
    create_node(applied, node)
    ensure_namespace(applied, "mk-rbac")
    create_pod(applied, "mk-rbac", "victim", node, {"app": "victim"})
    be = KubernetesBackend(config(kubeconfig), FakeClock(), evict=True, impersonate=CONTROLLER_SA)
    try:
        be.drain(node, "xid 79 on gpu 3")
        assert be.states([node])[node].ours  # the bulk read (node + pod lists) is allowed too
        st = be.state(node)
        assert st.ours and st.reason == "minutiae[default/controller]: xid 79 on gpu 3"
        assert be.evictions[node].evicted == ("mk-rbac/victim",)
        be.annotate(node, "last-check", "ok")
        be.resume(node)
        assert not be.state(node).ours
    finally:
        be.close()
    sa = KubeClient(config(kubeconfig), impersonate=CONTROLLER_SA)
    for method, path in [("DELETE", f"/api/v1/nodes/{node}"),
                         ("GET", "/api/v1/namespaces/kube-system/secrets"),
                         ("DELETE", "/api/v1/namespaces/mk-rbac/pods/victim"),
                         ("GET", "/api/v1/namespaces/mk-rbac/pods/victim")]:
        with pytest.raises(KubeAPIError) as err:
            sa.request(method, path)
        assert err.value.status == 403, (method, path)
    sa.close()
    agent = KubernetesBackend(config(kubeconfig), FakeClock(), impersonate=AGENT_SA)
    with pytest.raises(BackendError, match="forbidden"):
        agent.state(node)
    agent.close()
    delete(applied, f"/api/v1/nodes/{node}")
    delete(applied, "/api/v1/namespaces/mk-rbac/pods/victim")


@pytest.mark.parametrize("kind", ["DaemonSet", "Deployment"])
def test_container_args_are_accepted_by_the_cli(kind: str) -> None:
    """The args in the manifests parse with the real ``minutiae`` command (flags cannot drift)."""
    import click

    from minutiae.cli.main import cli

    args = by_kind(kind)["spec"]["template"]["spec"]["containers"][0]["args"]
    with click.Context(cli) as ctx:
        cmd = cli.get_command(ctx, args[0])
        assert cmd is not None, args[0]
        sub = cmd.make_context(args[0], list(args[1:]), resilient_parsing=False)
        assert sub.params  # parsed without a usage error

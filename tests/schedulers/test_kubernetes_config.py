"""kubeconfig and in-cluster configuration: what kubectl reads, errors that name the file."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import BackendUnavailable, ConfigError, ValidationError
from minutiae.schedulers.kubernetes.backend import KubernetesBackend, annotation_key
from minutiae.schedulers.kubernetes.config import (
    KubeConfig,
    load_in_cluster,
    load_kubeconfig,
    parse_kubeconfig,
)
from minutiae.testing import FakeClock
from minutiae.testing.limits import memory_cap

CERT = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\n"

TWO_CONTEXTS = f"""
apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority: ca.crt
- name: lab
  cluster: {{server: "http://127.0.0.1:8080", insecure-skip-tls-verify: true}}
users:
- name: ops
  user:
    client-certificate-data: {base64.b64encode(CERT).decode()}
    client-key-data: {base64.b64encode(KEY).decode()}
- name: bot
  user: {{token: abc.def}}
contexts:
- name: prod
  context: {{cluster: prod, user: ops, namespace: gpu}}
- name: lab
  context: {{cluster: lab, user: bot}}
current-context: prod
"""


def test_current_context_with_inline_client_cert(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("ca")
    (tmp_path / "config").write_text(TWO_CONTEXTS)
    kc = load_kubeconfig(tmp_path / "config")
    assert kc.server == "https://10.0.0.1:6443"
    assert kc.verify == str(tmp_path / "ca.crt")
    assert kc.token is None and kc.namespace == "gpu"
    assert kc.cert is not None
    certfile, keyfile = kc.cert
    assert Path(certfile).read_bytes() == CERT and Path(keyfile).read_bytes() == KEY
    assert stat.S_IMODE(os.stat(keyfile).st_mode) == 0o600


def test_explicit_context_with_token_and_insecure(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("ca")
    kc = parse_kubeconfig(TWO_CONTEXTS, "cfg", tmp_path, context="lab")
    assert kc == KubeConfig(server="http://127.0.0.1:8080", token="abc.def", verify=False,
                            cert=None, namespace="default", source="cfg")


@pytest.mark.parametrize("text, needle", [
    ("current-context: x\ncontexts: []\n", "context 'x' not found"),
    ("{{{", "not valid YAML"),
    ("- a\n- b\n", "not a kubeconfig"),
    ("contexts: [{name: a, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: ftp://x}}]\n"
     "current-context: a\n", "not an http(s) URL"),
    ("contexts: [{name: a, context: {cluster: c, user: u}}]\n"
     "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
     "users: [{name: u, user: {exec: {command: aws}}}]\ncurrent-context: a\n", "exec/auth-provider"),
    ("contexts: [{name: a, context: {cluster: c, user: u}}]\n"
     "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
     "users: [{name: u, user: {client-certificate-data: '!!notbase64'}}]\ncurrent-context: a\n",
     "not valid base64"),
])
def test_bad_kubeconfig_names_the_file(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "kubeconfig"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_kubeconfig(p)
    assert str(p) in str(err.value) and needle in str(err.value)


def test_missing_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.*cannot read kubeconfig"):
        load_kubeconfig(tmp_path / "nope")


#: an address-space cap: on main an endless read is a MemoryError, not the machine's
capped = memory_cap


@pytest.mark.parametrize(("content", "needle"), [
    (None, "binary data"),                       # /dev/zero: on main read whole, a MemoryError
    ("[" * 200_000 + "]" * 200_000, "not valid YAML (RecursionError)"),   # main: a traceback
    ("x" * (17 << 20), "larger than"),            # refused from its size, never read
], ids=["dev-zero", "deep-nesting", "17-MiB"])
def test_a_hostile_kubeconfig_is_a_config_error(tmp_path: Path, content: str | None,
                                                needle: str) -> None:
    p = Path("/dev/zero") if content is None else tmp_path / "kubeconfig"
    if content is not None:
        p.write_text(content)
    with capped(), pytest.raises(ConfigError, match=f"{p}.*{re.escape(needle)}"):
        load_kubeconfig(p)


def test_an_endless_token_file_in_a_kubeconfig_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "kubeconfig"
    p.write_text("contexts: [{name: a, context: {cluster: c, user: u}}]\n"
                 "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
                 "users: [{name: u, user: {tokenFile: /dev/zero}}]\ncurrent-context: a\n")
    with capped(), pytest.raises(ConfigError, match="tokenFile /dev/zero: binary data"):
        load_kubeconfig(p)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400))
def test_garbage_never_crashes(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_kubeconfig(text, "fuzz", Path("/nonexistent"))


def test_in_cluster_reads_the_serviceaccount_mount(tmp_path: Path) -> None:
    sa = tmp_path / "var/run/secrets/kubernetes.io/serviceaccount"
    sa.mkdir(parents=True)
    (sa / "token").write_text("tok\n")
    (sa / "ca.crt").write_text("ca")
    (sa / "namespace").write_text("minutiae")
    kc = load_in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "10.96.0.1",
                                    "KUBERNETES_SERVICE_PORT": "443"})
    assert kc == KubeConfig(server="https://10.96.0.1:443", token="tok", verify=str(sa / "ca.crt"),
                            namespace="minutiae", source=str(sa))
    v6 = load_in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "fd00::1"})
    assert v6.server == "https://[fd00::1]:443"
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        load_in_cluster(tmp_path, {})
    (sa / "token").unlink()
    with pytest.raises(ConfigError, match="serviceaccount/token"):
        load_in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})


def test_unreachable_api_server_is_backend_unavailable() -> None:
    be = KubernetesBackend(KubeConfig(server="https://127.0.0.1:1", token="t", verify=False),
                           FakeClock(), timeout=2.0)
    with pytest.raises(BackendUnavailable, match="cannot reach https://127.0.0.1:1"):
        be.state("gpu001")
    with pytest.raises(BackendUnavailable):
        be.drain("gpu001", "xid 79")


def test_node_names_and_annotation_keys_are_validated_before_any_request() -> None:
    be = KubernetesBackend(KubeConfig(server="https://127.0.0.1:1"), FakeClock())
    for bad in ["../../api", "a b", "x;rm", ""]:
        with pytest.raises(ValidationError):
            be.state(bad)
    assert annotation_key("last-check") == "minutiae.io/last-check"
    assert annotation_key("example.com/x.y") == "example.com/x.y"
    for bad in ["a/b/c", "-x", "x y", "/", "a" * 64]:
        with pytest.raises(ValidationError):
            annotation_key(bad)

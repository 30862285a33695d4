"""Where the Kubernetes API is and how to authenticate: a kubeconfig file or in-cluster config.

``load_kubeconfig(path)`` reads the file kubectl reads (current context → cluster + user; bearer
token, token file or client certificate, inline ``*-data`` or file paths relative to the
kubeconfig). ``load_in_cluster(root)`` reads the service-account mount a pod gets
(``/var/run/secrets/kubernetes.io/serviceaccount`` under ``root``) and the
``KUBERNETES_SERVICE_HOST``/``PORT`` variables. Inline certificate data is written to a private
temporary directory because Python's ``ssl`` only loads certificates from files.
"""

from __future__ import annotations

import base64
import binascii
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from minutiae.errors import ConfigError, InputError
from minutiae.inputs import read_text

SA_DIR = "var/run/secrets/kubernetes.io/serviceaccount"
#: a kubeconfig with embedded certificates is some KiB; past this it is not one
MAX_KUBECONFIG = 16 << 20
#: a kubeconfig user's tokenFile: one line
MAX_TOKEN_FILE = 64 << 10


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """Everything the backend needs to reach one API server.

    ``verify`` is a CA bundle path, True (system CAs) or False (``insecure-skip-tls-verify``).
    ``cert`` is ``(certfile, keyfile)`` for client-certificate authentication.
    """

    server: str
    token: str | None = None
    verify: str | bool = True
    cert: tuple[str, str] | None = None
    namespace: str = "default"
    source: str = ""


def _private_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="minutiae-kube-"))


def _materialise(entry: Mapping[str, Any], key: str, base: Path, where: str,
                 scratch: list[Path]) -> str | None:
    """``key`` as a file path: ``key-data`` (base64) written to a 0600 temp file, or ``key``
    resolved against the kubeconfig's directory."""
    data = entry.get(f"{key}-data")
    if data:
        try:
            raw = base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{where}: {key}-data is not valid base64") from None
        if not scratch:
            scratch.append(_private_dir())
        out = scratch[0] / key
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        return str(out)
    path = entry.get(key)
    if path:
        p = Path(str(path))
        p = p if p.is_absolute() else base / p
        if not p.is_file():
            raise ConfigError(f"{where}: {key} {p} does not exist")
        return str(p)
    return None


def _named(items: Any, name: str, what: str, where: str) -> Mapping[str, Any]:
    if not isinstance(items, list):
        raise ConfigError(f"{where}: no {what}s list")
    for item in items:
        if isinstance(item, Mapping) and item.get("name") == name:
            body = item.get(what)
            if not isinstance(body, Mapping):
                raise ConfigError(f"{where}: {what} {name!r} has no {what} section")
            return body
    raise ConfigError(f"{where}: {what} {name!r} not found")


def parse_kubeconfig(text: str, where: str, base: Path, context: str | None = None) -> KubeConfig:
    """Parse kubeconfig YAML text (``base``: directory relative paths are resolved against)."""
    try:
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:  # RecursionError: 200,000 nested '['
        raise ConfigError(f"{where}: not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: not a kubeconfig (expected a mapping)")
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise ConfigError(f"{where}: no current-context and no context given")
    ctx = _named(doc.get("contexts"), str(ctx_name), "context", where)
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster")), "cluster", where)
    user: Mapping[str, Any] = {}
    if ctx.get("user"):
        user = _named(doc.get("users"), str(ctx.get("user")), "user", where)
    server = str(cluster.get("server") or "")
    if not server.startswith(("https://", "http://")):
        raise ConfigError(f"{where}: cluster server {server!r} is not an http(s) URL")
    scratch: list[Path] = []
    verify: str | bool = True
    if cluster.get("insecure-skip-tls-verify"):
        verify = False
    else:
        ca = _materialise(cluster, "certificate-authority", base, where, scratch)
        if ca:
            verify = ca
    token = user.get("token")
    if not token and user.get("tokenFile"):
        tf = Path(str(user["tokenFile"]))
        tf = tf if tf.is_absolute() else base / tf
        try:
            token = read_text(tf, limit=MAX_TOKEN_FILE, what="token file").strip()
        except InputError as exc:
            raise ConfigError(f"{where}: tokenFile {exc}") from None
    if (user.get("exec") or user.get("auth-provider")) and not token:
        raise ConfigError(f"{where}: exec/auth-provider credentials are not supported; "
                          "use a token or client certificate")
    certfile = _materialise(user, "client-certificate", base, where, scratch)
    keyfile = _materialise(user, "client-key", base, where, scratch)
    if bool(certfile) != bool(keyfile):
        raise ConfigError(f"{where}: client certificate and key must be given together")
    return KubeConfig(
        server=server.rstrip("/"),
        token=str(token) if token else None,
        verify=verify,
        cert=(certfile, keyfile) if certfile and keyfile else None,
        namespace=str(ctx.get("namespace") or "default"),
        source=where,
    )


def load_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> KubeConfig:
    p = Path(path)
    try:   # bounded: /dev/zero or a log given by mistake is refused, never read whole
        text = read_text(p, limit=MAX_KUBECONFIG, what="kubeconfig")
    except InputError as exc:
        why = str(exc).removeprefix(f"{p}: ")
        raise ConfigError(f"{p}: cannot read kubeconfig ({why})") from None
    return parse_kubeconfig(text, str(p), p.parent, context)


def load_in_cluster(root: str | os.PathLike[str] = "/",
                    env: Mapping[str, str] | None = None) -> KubeConfig:
    """In-cluster config: the pod's service-account token, CA and namespace under ``root``."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    sa = Path(root) / SA_DIR
    if not host:
        raise ConfigError("not in a cluster: KUBERNETES_SERVICE_HOST is unset")
    try:
        token = (sa / "token").read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{sa / 'token'}: cannot read service-account token ({exc.strerror})") from None
    ca = sa / "ca.crt"
    ns_file = sa / "namespace"
    namespace = ns_file.read_text().strip() if ns_file.is_file() else "default"
    h = f"[{host}]" if ":" in host else host
    return KubeConfig(server=f"https://{h}:{port}", token=token,
                      verify=str(ca) if ca.is_file() else True, namespace=namespace or "default",
                      source=str(sa))

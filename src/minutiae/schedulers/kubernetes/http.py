"""A small Kubernetes API client over httpx: JSON in and out, errors in minutiae's hierarchy.

Transport failures (refused, timeout, TLS) become ``BackendUnavailable``; 401/403 and other
refusals become ``BackendError`` carrying the API server's own message (``Status.message``).
"""

from __future__ import annotations

from typing import Any

import httpx

from minutiae.errors import BackendError, BackendUnavailable
from minutiae.schedulers.kubernetes.config import KubeConfig

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


class KubeAPIError(BackendError):
    """The API server answered with an error status; ``status`` is the HTTP code."""

    def __init__(self, message: str, status: int, reason: str = "") -> None:
        self.status = status
        self.reason = reason
        super().__init__(message)


class KubeClient:
    """Thin JSON client for one API server. ``impersonate`` sets ``Impersonate-User`` (tests check
    the shipped RBAC by acting as the controller's ServiceAccount)."""

    def __init__(self, config: KubeConfig, *, impersonate: str | None = None,
                 transport: httpx.BaseTransport | None = None, timeout: float = 10.0) -> None:
        headers = {"Accept": "application/json", "User-Agent": "minutiae"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        if impersonate:
            headers["Impersonate-User"] = impersonate
        self.server = config.server
        self._args: dict[str, Any] = {"base_url": config.server, "headers": headers,
                                      "verify": config.verify, "cert": config.cert}
        self._http = httpx.Client(timeout=timeout, transport=transport, **self._args)

    def streaming(self) -> httpx.Client:
        """A client of its own with the same server and credentials (a watch holds one)."""
        return httpx.Client(timeout=10.0, **self._args)

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, *, json: Any = None, params: dict[str, str] | None = None,
                content_type: str | None = None, ok: tuple[int, ...] = (200, 201)) -> dict[str, Any]:
        """Send one request; return the decoded JSON object, raise on a status not in ``ok``."""
        headers = {"Content-Type": content_type} if content_type else None
        try:
            resp = self._http.request(method, path, json=json, params=params, headers=headers)
        except httpx.TransportError as exc:
            raise BackendUnavailable(
                f"kubernetes: cannot reach {self.server} ({exc.__class__.__name__}: {exc})"
            ) from None
        body: Any
        try:
            body = resp.json() if resp.content else {}
        except ValueError:
            body = {}
        if resp.status_code in ok:
            if not isinstance(body, dict):
                raise BackendError(f"kubernetes: {method} {path}: answer is not a JSON object")
            return body
        message = body.get("message") if isinstance(body, dict) else None
        reason = str(body.get("reason", "")) if isinstance(body, dict) else ""
        text = message or resp.text[:200] or resp.reason_phrase
        what = {401: "unauthorised (check the token or certificate)", 403: "forbidden"}.get(
            resp.status_code, f"HTTP {resp.status_code}")
        raise KubeAPIError(f"kubernetes: {method} {path}: {what}: {text}", resp.status_code, reason)

    def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        return self.request("GET", path, params=params)

    def patch(self, path: str, body: Any, content_type: str = MERGE) -> dict[str, Any]:
        return self.request("PATCH", path, json=body, content_type=content_type)

    def post(self, path: str, body: Any, ok: tuple[int, ...] = (200, 201)) -> dict[str, Any]:
        return self.request("POST", path, json=body, ok=ok)

    def exists(self, path: str) -> bool:
        """GET ``path``: True on 200, False on 404 (API discovery)."""
        try:
            self.get(path)
        except KubeAPIError as exc:
            if exc.status == 404:
                return False
            raise
        return True

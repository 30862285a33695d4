"""The Prometheus HTTP API query layer (``/api/v1/query`` and ``/api/v1/query_range``).

httpx with an injectable client (tests pass a recording transport or talk to the real server).
Long ranges are split so that no request asks for more than ``MAX_POINTS`` points per series
(Prometheus refuses more than 11,000) and the pieces are joined per series. Failures name the
URL: unreachable -> ``SourceUnavailable``; an answer that is not the API's JSON -> ``ParseError``;
``"status": "error"`` -> ``SourceUnavailable`` carrying Prometheus' own ``errorType: error``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from minutiae.errors import ParseError, SourceUnavailable

MAX_POINTS = 10_000


class Prometheus:
    def __init__(self, url: str, client: httpx.Client | None = None, timeout: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise SourceUnavailable(url, "Prometheus URL must start with http:// or https://")
        self.url = url.rstrip("/")
        self.client = client or httpx.Client(timeout=timeout)

    def _get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        where = f"{self.url}{path}"
        try:
            resp = self.client.get(where, params=params)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:   # InvalidURL: a newline in it
            raise SourceUnavailable(repr(where), f"cannot reach Prometheus ({exc})") from None
        try:
            body = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            raise ParseError(f"HTTP {resp.status_code}, not Prometheus API JSON: "
                             f"{resp.text[:120]!r}", where) from None
        if not isinstance(body, dict) or "status" not in body:
            raise ParseError("not Prometheus API JSON (no status)", where)
        if body["status"] != "success":
            raise SourceUnavailable(where, f"Prometheus says {body.get('errorType', 'error')}: "
                                           f"{body.get('error', 'no reason given')}")
        data = body.get("data")
        if not isinstance(data, dict) or not isinstance(data.get("result"), list):
            raise ParseError("answer without data.result", where)
        return data

    def query(self, query: str, time: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": query}
        if time is not None:
            params["time"] = f"{time:.3f}"
        return list(self._get("/api/v1/query", params)["result"])

    def query_range(self, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """Matrix result over [start, end]; series split across requests are joined."""
        if step <= 0 or end < start:
            raise ValueError("query_range needs step > 0 and end >= start")
        series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        t = start
        span = step * (MAX_POINTS - 1)
        while t <= end:
            stop = min(end, t + span)
            data = self._get("/api/v1/query_range", {"query": query, "start": f"{t:.3f}",
                                                     "end": f"{stop:.3f}", "step": f"{step:g}"})
            for s in data["result"]:
                if not isinstance(s, dict) or not isinstance(s.get("metric"), dict):
                    raise ParseError("matrix series without metric labels", f"{self.url}/api/v1/query_range")
                key = tuple(sorted(s["metric"].items()))
                entry = series.setdefault(key, {"metric": s["metric"], "values": []})
                entry["values"].extend(s.get("values") or [])
            t = stop + step
        return list(series.values())


def fetch_dcgm(prom: Prometheus, start: float, end: float, step: float,
               columns: dict[str, tuple[str, ...]]) -> dict[str, list[dict[str, Any]]]:
    """One matrix result per telemetry column (the first of its DCGM field names that has
    series; older dcgm-exporters call the clock-event field CLOCK_THROTTLE_REASONS)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for col, names in columns.items():
        for name in names:
            result = prom.query_range(name, start, end, step)
            if result:
                out[col] = result
                break
    return out

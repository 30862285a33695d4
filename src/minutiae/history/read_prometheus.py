"""Run history from Prometheus (optional source): jobs export a gauge of their step time, e.g.
``minutiae_run_seconds_per_step{run_id="…", signature="…", driver="570.158.01", nccl="2.23.4",
nodes="gpu001 gpu002", gpus="16"} 1.53`` while they run; one series per run.

We read it with ``/api/v1/query_range`` over the window: a run's ``time`` is its first sample, its
value the median of its samples, its ``duration_s`` last − first sample; every other label (except
``job``/``instance``/``__name__``) is an attribute. The HTTP client is injectable (``httpx``
transport) so tests can run the same code against a recording transport or the real server.
"""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

import httpx

from minutiae.errors import DataError, ParseError, SourceUnavailable
from minutiae.history.parse import RunLoad, records_from_rows

DEFAULT_METRIC = "minutiae_run_seconds_per_step"
_METRIC_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_IGNORED = frozenset({"__name__", "job", "instance"})
MAX_POINTS = 10_000   # Prometheus refuses more than 11,000 points per series


def fetch_runs(url: str, start: float, end: float, metric: str = DEFAULT_METRIC,
               client: httpx.Client | None = None, timeout: float = 10.0) -> RunLoad:
    """Runs whose gauge has samples in [start, end]."""
    if not _METRIC_RE.match(metric):
        raise ParseError(f"invalid metric name {metric!r}", url)
    if end <= start:
        raise ParseError("empty time window", url)
    step = max(15.0, math.ceil((end - start) / MAX_POINTS))
    own = client is None
    c = client or httpx.Client(timeout=timeout)
    try:
        resp = c.get(url.rstrip("/") + "/api/v1/query_range",
                     params={"query": metric, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    except httpx.HTTPError as exc:
        raise SourceUnavailable(url, f"Prometheus unreachable: {exc}") from None
    except httpx.InvalidURL as exc:   # not an HTTPError: a newline in --prom
        raise ParseError(f"not a URL: {exc}", repr(url)) from None
    finally:
        if own:
            c.close()
    return parse_query_range(resp.status_code, resp.text, url, step)


def parse_query_range(status: int, body: str, where: str, step: float = 0.0) -> RunLoad:
    """Pure: a ``query_range`` response → runs (see module doc)."""
    import json

    try:
        doc: Any = json.loads(body)
    except ValueError:
        raise ParseError(f"HTTP {status}: not JSON", where) from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        raise ParseError(f"HTTP {status}: Prometheus error: {err or 'unexpected response'}", where)
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise ParseError("expected a matrix result", where)
    rows: list[dict[str, str]] = []
    cols: dict[str, None] = dict.fromkeys(["run_id", "time", "signature", "seconds_per_step", "duration_s"])
    for series in data["result"]:
        if not isinstance(series, dict):
            continue
        labels = series.get("metric") or {}
        values = series.get("values")
        if not isinstance(values, list):
            continue
        pts = []
        for v in values:
            try:
                t, x = float(v[0]), float(v[1])
            except (TypeError, ValueError, LookupError):
                continue
            if math.isfinite(x) and x > 0:
                pts.append((t, x))
        if not pts or not isinstance(labels, dict):
            continue
        row = {k: str(v) for k, v in labels.items() if k not in _IGNORED}
        for k in row:
            cols.setdefault(k, None)
        row.update(time=f"{pts[0][0]}", seconds_per_step=f"{statistics.median(x for _, x in pts)}",
                   duration_s=f"{pts[-1][0] - pts[0][0] + step}")
        rows.append(row)
    if not rows:
        raise DataError("no samples of the run metric in the window (is anything exporting it?)", where)
    return records_from_rows(rows, list(cols), where, first_line=1)

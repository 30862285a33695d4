"""Prometheus run source: the same parsing against a recording transport and the real server."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from minutiae.errors import DataError, ParseError, SourceUnavailable
from minutiae.history.read_prometheus import fetch_runs, parse_query_range

# shape of a real /api/v1/query_range answer (Prometheus HTTP API docs)
BODY = {
    "status": "success",
    "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "minutiae_run_seconds_per_step", "job": "minutiae", "instance": "h:1",
                    "run_id": "r1", "signature": "llama", "driver": "570.158.01", "nodes": "gpu001 gpu002",
                    "gpus": "16"},
         "values": [[1000.0, "1.50"], [1015.0, "1.52"], [1030.0, "1.51"]]},
        {"metric": {"run_id": "r2", "signature": "llama"}, "values": [[2000.0, "NaN"], [2015.0, "1.7"]]},
        {"metric": {"run_id": "r3", "signature": "llama"}, "values": [[3000.0, "NaN"]]},
    ]},
}


def _client(status: int, body: object, seen: list[httpx.Request]) -> httpx.Client:
    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(status, text=body if isinstance(body, str) else json.dumps(body))
    return httpx.Client(transport=httpx.MockTransport(handler))


def test_runs_from_matrix() -> None:
    seen: list[httpx.Request] = []
    load = fetch_runs("http://prom:9090/", 0.0, 86400.0, client=_client(200, BODY, seen))
    assert seen[0].url.path == "/api/v1/query_range"
    assert seen[0].url.params["query"] == "minutiae_run_seconds_per_step"
    assert float(seen[0].url.params["step"]) == 15.0
    r1, r2 = load.records
    assert (r1.run_id, r1.time, r1.value, r1.nodes, r1.gpus) == ("r1", 1000.0, 1.51, ("gpu001", "gpu002"), 16)
    assert r1.attrs["driver"] == {"570.158.01"} and "job" not in r1.attrs and "instance" not in r1.attrs
    assert r1.duration_s == 45.0 and r2.value == 1.7


@pytest.mark.parametrize("status,body,msg", [
    (200, "<html>", "not JSON"),
    (400, {"status": "error", "error": "parse error at char 3"}, "parse error at char 3"),
    (200, {"status": "success", "data": {"resultType": "vector", "result": []}}, "matrix"),
    (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, "no samples"),
])
def test_bad_answers(status: int, body: object, msg: str) -> None:
    with pytest.raises((ParseError, DataError), match=msg):
        fetch_runs("http://prom:9090", 0.0, 10.0, client=_client(status, body, []))


def test_down_and_bad_metric() -> None:
    def boom(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")
    with pytest.raises(SourceUnavailable, match="Prometheus unreachable"):
        fetch_runs("http://prom:9090", 0.0, 10.0, client=httpx.Client(transport=httpx.MockTransport(boom)))
    with pytest.raises(ParseError, match="invalid metric"):
        fetch_runs("http://prom:9090", 0.0, 10.0, metric="up} or vector(1")
    assert parse_query_range(200, json.dumps(BODY), "x").records[0].run_id == "r1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.prometheus
def test_contract_with_real_prometheus(prom_url: str, prom_targets: str) -> None:
    """A job exports its step-time gauge; the real Prometheus scrapes it; we read runs back."""
    from prometheus_client import CollectorRegistry, Gauge, start_http_server

    reg = CollectorRegistry()
    g = Gauge("minutiae_run_seconds_per_step", "step time of a running job",
              ["run_id", "signature", "driver", "nodes", "gpus"], registry=reg)
    g.labels("ct-1", "contract", "570.158.01", "gpu001 gpu002", "16").set(1.25)
    g.labels("ct-2", "contract", "570.124.06", "gpu003", "8").set(2.5)
    port = _free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    targets = Path(prom_targets)
    before = targets.read_text() if targets.exists() else "[]"
    try:
        targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"]}]))
        start = time.time() - 5
        deadline = time.time() + 30
        load = None
        while time.time() < deadline:
            try:
                load = fetch_runs(prom_url, start, time.time() + 1)
                if {r.run_id for r in load.records} >= {"ct-1", "ct-2"}:
                    break
            except DataError:
                pass
            time.sleep(0.5)
        assert load is not None
        by = {r.run_id: r for r in load.records}
        assert by["ct-1"].value == 1.25 and by["ct-1"].nodes == ("gpu001", "gpu002")
        assert by["ct-2"].attrs["driver"] == {"570.124.06"} and by["ct-2"].gpus == 8
    finally:
        targets.write_text(before)
        server.shutdown()
        thread.join(timeout=5)

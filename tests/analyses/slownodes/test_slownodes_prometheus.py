"""slownodes from Prometheus: the query layer against a recording transport, then the same
code against the real Prometheus scraping dcgm-exporter-format metrics."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.analyses.slownodes.parse_prometheus import dcgm_telemetry, matrix_rows
from minutiae.analyses.slownodes.read_prometheus import MAX_POINTS, Prometheus
from minutiae.cli.main import main
from minutiae.errors import ParseError, SourceUnavailable


class Recorder:
    def __init__(self, answer: Any, status: int = 200) -> None:
        self.answer, self.status, self.requests = answer, status, []  # type: ignore[var-annotated]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(dict(request.url.params))
        body = self.answer(request) if callable(self.answer) else self.answer
        return httpx.Response(self.status, text=body if isinstance(body, str) else json.dumps(body))


def _prom(rec: Recorder) -> Prometheus:
    return Prometheus("http://prom:9090", httpx.Client(transport=httpx.MockTransport(rec)))


def _series(node: str, gpu: int, values: list[tuple[float, str]]) -> dict[str, Any]:
    return {"metric": {"__name__": "DCGM_FI_DEV_SM_CLOCK", "gpu": str(gpu), "Hostname": node,
                       "modelName": "NVIDIA H100 80GB HBM3"}, "values": [list(v) for v in values]}


def test_query_range_is_chunked_and_joined() -> None:
    def answer(req: httpx.Request) -> dict[str, Any]:
        start = float(req.url.params["start"])
        return {"status": "success", "data": {"resultType": "matrix",
                                              "result": [_series("gpu001", 0, [(start, "1980")])]}}

    rec = Recorder(answer)
    out = _prom(rec).query_range("DCGM_FI_DEV_SM_CLOCK", 0.0, 3 * MAX_POINTS, 1.0)
    assert len(rec.requests) == 4  # 30,000 points at 1 s -> pieces of <= 10,000 points
    assert all(float(r["end"]) - float(r["start"]) <= MAX_POINTS - 1 for r in rec.requests)
    assert len(out) == 1 and len(out[0]["values"]) == 4


@pytest.mark.parametrize(("status", "body", "error", "text"), [
    (400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
     SourceUnavailable, "bad_data: parse error at char 3"),
    (200, "<html>proxy login</html>", ParseError, "not Prometheus API JSON"),
    (200, {"status": "success"}, ParseError, "without data.result"),
    (503, {"nothing": 1}, ParseError, "no status"),
])
def test_error_answers(status: int, body: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text) as info:
        _prom(Recorder(body, status)).query_range("up", 0, 10, 1)
    assert "http://prom:9090/api/v1/query_range" in str(info.value)


def test_unreachable_is_source_unavailable(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["slownodes", "--prometheus", "http://127.0.0.1:9", "--since", "5m"])
    err = capsys.readouterr().err
    assert rc == 3 and "cannot reach Prometheus" in err and "127.0.0.1:9" in err


def test_dcgm_series_to_table() -> None:
    res = {"sm_clock_mhz": [_series("gpu001", 0, [(10.0, "1980"), (11.0, "NaN")]),
                            _series("gpu001", 1, [(10.0, "1700")]),
                            {"metric": {"gpu": "x", "Hostname": "h"}, "values": [[1, "2"]]}],
           "clock_event_reasons": [{"metric": {"gpu": "1", "Hostname": "gpu001"},
                                    "values": [[10.0, "72"]]}]}
    df = dcgm_telemetry(res, "prom")
    assert df.select("time", "node", "gpu", "sm_clock_mhz", "clock_event_reasons").rows() == [
        (10.0, "gpu001", 0, 1980.0, None), (11.0, "gpu001", 0, None, None),
        (10.0, "gpu001", 1, 1700.0, 72.0)]


@settings(max_examples=80, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=5) | st.integers(),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=20))
def test_matrix_rows_never_crash(data: Any) -> None:
    try:
        matrix_rows(data if isinstance(data, list) else [data], "sm_clock_mhz", "prom")
    except ParseError:
        pass
    except (AttributeError, TypeError) as exc:  # pragma: no cover - the property under test
        raise AssertionError(f"crashed on {data!r}: {exc}") from exc


# ---------------------------------------------------------------- the real Prometheus
def _exposition(slow: tuple[str, int]) -> str:
    """dcgm-exporter's text format (field names and labels as in realdata/dcgm)."""
    out = []
    for name, typ in (("DCGM_FI_DEV_SM_CLOCK", "gauge"), ("DCGM_FI_DEV_GPU_TEMP", "gauge"),
                      ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge")):
        out += [f"# HELP {name} {name}.", f"# TYPE {name} {typ}"]
        for node in ("ct-gpu01", "ct-gpu02"):
            for g in range(4):
                hot = (node, g) == slow
                value = {"DCGM_FI_DEV_SM_CLOCK": 1755 if hot else 1980 - g,
                         "DCGM_FI_DEV_GPU_TEMP": 90 if hot else 62,
                         "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x48 if hot else 0}[name]
                labels = (f'gpu="{g}",UUID="GPU-{hash((node, g)) & 0xffffffff:08x}",device="nvidia{g}",'
                          f'modelName="NVIDIA H100 80GB HBM3",Hostname="{node}"')
                out.append(f"{name}{{{labels}}} {value}")
    return "\n".join(out) + "\n"


@pytest.mark.prometheus
@pytest.mark.slow
def test_contract_with_real_prometheus(prom_url: str, prom_targets: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    text = _exposition(("ct-gpu02", 3)).encode()

    class Exporter(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    targets = Path(prom_targets)
    before = targets.read_text() if targets.exists() else "[]"
    mine = {"targets": [f"127.0.0.1:{server.server_port}"], "labels": {"job": "dcgm-contract"}}
    try:
        targets.write_text(json.dumps([*json.loads(before or "[]"), mine]))
        prom = Prometheus(prom_url)
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            res = prom.query_range('DCGM_FI_DEV_SM_CLOCK{Hostname="ct-gpu02",gpu="3"}',
                                   time.time() - 60, time.time(), 1)
            if res and len(res[0]["values"]) >= 8:
                break
            time.sleep(0.5)
        else:
            pytest.fail("Prometheus never scraped the exporter")
        rc = main(["slownodes", "--prometheus", prom_url, "--since", "60s", "--step", "1s",
                   "--min-duration", "5s", "--json"])
        doc = json.loads(capsys.readouterr().out)
    finally:
        targets.write_text(before)
        server.shutdown()
    mine_found = [s for s in doc["suspects"] if s["node"].startswith("ct-")]
    assert rc == 1 and len(mine_found) == 1
    (s,) = mine_found
    assert (s["node"], s["gpu"], s["scope"]) == ("ct-gpu02", 3, "gpu")
    assert s["deficit"] == pytest.approx(1 - 1755 / 1978.5, abs=0.002)
    assert s["reasons"] == ["HW slowdown", "HW thermal slowdown"]
    assert "+28 C vs peers" in s["evidence"]


@pytest.mark.parametrize("step", ["0", "0s", "0m"])
def test_a_zero_step_is_one_line_exit_3(step: str, capsys: pytest.CaptureFixture[str]) -> None:
    """On main ``--step 0`` reached ``query_range``'s ValueError: a traceback."""
    assert main(["slownodes", "--prometheus", "http://127.0.0.1:1", "--step", step]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"minutiae: error: --step must be more than 0 s, got {step!r}"], err

"""dcgm-exporter Prometheus text → GPU observations; field names from dcgm-exporter's CSVs.

The scrape below is built from the real counter CSV (``etc/default-counters.csv``, every field
listed, commented or not) in dcgm-exporter's exposition layout; the URL path is served by a real
HTTP server on loopback.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import InputError, ParseError, SourceUnavailable
from minutiae.node.sources.dcgm.parse import COMPAT, FIELDS, parse_dcgm
from minutiae.node.sources.dcgm.read import read_dcgm

LABELS = ('gpu="{i}",UUID="GPU-{i}aaa",pci_bus_id="00000000:{bus}:00.0",device="nvidia{i}",'
          'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu001",DCGM_FI_DRIVER_VERSION="535.183.01"')


def _csv_fields(realdata: Path, name: str) -> dict[str, str]:
    out = {}
    for line in (realdata / "dcgm" / "dcgm-exporter" / name).read_text().splitlines():
        body = line.lstrip("# ").strip()
        parts = [p.strip() for p in body.split(",")]
        if len(parts) >= 3 and parts[0].replace("_", "").isalnum() and parts[0][:4].lower() == "dcgm":
            out[parts[0]] = parts[1]
    return out


def _scrape(fields: dict[str, str], values: dict[str, float]) -> str:
    lines = []
    for name, typ in fields.items():
        if typ not in ("gauge", "counter"):
            continue
        lines += [f"# HELP {name} from default-counters.csv", f"# TYPE {name} {typ}"]
        for i, bus in enumerate(("19", "3B")):
            v = values.get(name, 0)
            lines.append(f"{name}{{{LABELS.format(i=i, bus=bus)}}} {v if i == 0 else 0}")
    return "\n".join(lines) + "\n"


def test_every_mapped_field_exists_in_dcgm_exporters_csvs(realdata: Path) -> None:
    known = {**_csv_fields(realdata, "default-counters.csv"), **_csv_fields(realdata, "dcp-metrics-included.csv")}
    compat = _csv_fields(realdata, "1.x-compatibility-metrics.csv")
    not_in_csv = {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
                  "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_PCIE_LINK_GEN",
                  "DCGM_FI_DEV_PCIE_LINK_WIDTH", "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
                  "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"}  # DCGM fields a site adds to its CSV
    assert set(FIELDS) - set(known) == not_in_csv
    assert set(COMPAT) <= set(compat)


def test_scrape_from_default_counters(realdata: Path) -> None:
    fields = _csv_fields(realdata, "default-counters.csv")
    text = _scrape(fields, {
        "DCGM_FI_DEV_GPU_TEMP": 71, "DCGM_FI_DEV_POWER_USAGE": 612.5, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 120,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 3,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1, "DCGM_FI_DEV_XID_ERRORS": 79,
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 5, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 7,
        "DCGM_FI_DEV_RETIRED_PENDING": 1,
    })
    s = parse_dcgm(text, "scrape")
    g = "gpu:0000:19:00.0"
    assert s.components("gpu:") == [g, "gpu:0000:3b:00.0"]
    assert s.value(g, "temperature_c") == 71.0
    assert s.value(g, "power_w") == 612.5
    assert s.value(g, "pcie_replay") == 120
    assert s.value(g, "ecc_dbe_volatile") == 2
    assert s.value(g, "remap_uncorrectable") == 3
    assert s.value(g, "remap_failure") is True
    assert s.value(g, "retired_pages_pending") is True
    assert s.value(g, "last_xid") == 79
    assert s.value(g, "nvlink_errors") == 12  # flit + replay (data/recovery 0)
    assert s.value(g, "driver_version") == "535.183.01"
    assert s.value(g, "name") == "NVIDIA H100 80GB HBM3"
    assert s.value("node", "gpu_count") == 2
    assert s.value("gpu:0000:3b:00.0", "remap_failure") is False
    assert s.problems == ()


def test_compat_names_and_no_pci_label() -> None:
    text = 'dcgm_gpu_temp{gpu="0",UUID="GPU-x"} 40\ndcgm_xid_errors{gpu="0",UUID="GPU-x"} 48\n'
    s = parse_dcgm(text, "old")
    assert s.value("gpu:nvidia0", "temperature_c") == 40.0
    assert s.value("gpu:nvidia0", "last_xid") == 48


def test_mig_instances_are_skipped() -> None:
    text = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",pci_bus_id="00000000:19:00.0"} 40\n'
            'DCGM_FI_DEV_GPU_TEMP{gpu="0",pci_bus_id="00000000:19:00.0",GPU_I_ID="1",GPU_I_PROFILE="1g.10gb"} 99\n')
    assert parse_dcgm(text, "mig").value("gpu:0000:19:00.0", "temperature_c") == 40.0


def test_garbage_lines_are_problems_and_the_rest_is_kept() -> None:
    text = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",pci_bus_id="00000000:19:00.0"} 40\n'
            'this is not prometheus\n'
            'DCGM_FI_DEV_POWER_USAGE{gpu="0",pci_bus_id="00000000:19:00.0"} NaN\n')
    s = parse_dcgm(text, "mixed")
    assert s.value("gpu:0000:19:00.0", "temperature_c") == 40.0
    assert sorted(p.where for p in s.problems) == ["mixed: DCGM_FI_DEV_POWER_USAGE", "mixed:2"]


def test_not_dcgm() -> None:
    with pytest.raises(ParseError, match="no DCGM_FI_"):
        parse_dcgm("node_load1 0.5\n", "node-exporter")


class _Handler(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802
        code = 200 if self.path == "/metrics" else 404
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body if code == 200 else b"nope")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def exporter(realdata: Path) -> Iterator[str]:
    _Handler.body = _scrape(_csv_fields(realdata, "default-counters.csv"),
                            {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 9}).encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_url_source(exporter: str) -> None:
    s = read_dcgm(exporter + "/metrics")
    assert s.value("gpu:0000:19:00.0", "pcie_replay") == 9
    with pytest.raises(SourceUnavailable, match="HTTP 404"):
        read_dcgm(exporter + "/other")


def test_unreachable_url_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match="127.0.0.1:9"):
        read_dcgm("http://127.0.0.1:9/metrics", timeout_s=2)
    with pytest.raises(InputError, match="nope.prom"):
        read_dcgm(str(tmp_path / "nope.prom"))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=800))
def test_never_crashes(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse_dcgm('DCGM_FI_DEV_GPU_TEMP{gpu="0"} 1\n' + text, "fuzz")

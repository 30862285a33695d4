"""Counter rules (checks/catalog/counters.toml): schema validation, examples, real captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.errors import ConfigError
from minutiae.model import COUNTER_KINDS, Action, Severity
from minutiae.node.sources.ib.read_sysfs import read_sysfs_ib
from minutiae.node.sources.nvidia_smi.parse.text import parse_nvidia_smi_text
from minutiae.node.sources.nvidia_smi.parse.xml import parse_nvidia_smi_xml
from minutiae.rules.counters.load import build_rules, counter_rules
from minutiae.rules.counters.model import Context, context, evaluate
from minutiae.rules.logs import catalog_text, parse_toml
from minutiae.testing.sysfs import ib_tree

NOW = 1_700_000_000.0


def test_shipped_catalog_loads_and_covers_the_counter_vocabulary() -> None:
    rules = counter_rules()
    kinds = {r.kind for r in rules}
    # every DESIGN.md counter kind has a rule
    assert kinds >= COUNTER_KINDS, COUNTER_KINDS - kinds
    assert len({r.id for r in rules}) == len(rules)


def test_each_rule_has_examples_that_fire_and_that_do_not() -> None:
    doc = parse_toml(catalog_text("counters.toml"), "counters.toml")
    for item in doc["rule"]:
        fires = [e["fires"] for e in item["example"]]
        assert True in fires and False in fires, item["id"]


def _one(extra: str) -> str:
    return """
[[rule]]
id = "t"
kind = "ecc_dbe"
component = "gpu"
metric = "ecc_dbe_volatile"
severity = "critical"
action = "reset_gpu"
message = "x"
""" + extra


@pytest.mark.parametrize(("extra", "error"), [
    ('op = "gt"\nthreshold = 0\nexample = [{ values = { ecc_dbe_volatile = 0 }, fires = true }]', "should fire"),
    ('op = "gt"\nthreshold = 0\nexample = [{ values = { ecc_dbe_volatile = 1 }, fires = false }]', "at least one with fires = true"),
    ('op = "gt"\nexample = [{ values = { ecc_dbe_volatile = 1 }, fires = true }]', "needs a threshold"),
    ('op = "between"\nthreshold = 0', "op must be one of"),
    ('op = "bits_any"\nbits = ["hw_fire"]', "unknown clock-event reason"),
    ('op = "gt"\nthreshold = 0\ncolour = "red"', "unknown keys"),
    ('op = "lt_metric"', "needs other"),
])
def test_invalid_rules_name_the_rule(extra: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error) as exc:
        build_rules(parse_toml(_one(extra), "site.toml"), "site.toml")
    assert "site.toml: rule 't'" in str(exc.value)


def test_bad_severity() -> None:
    text = _one('op = "gt"\nthreshold = 0').replace('"critical"', '"dire"')
    with pytest.raises(ConfigError, match="unknown severity/action"):
        build_rules(parse_toml(text, "s"), "s")


def test_h100_535_161_throttle_findings(realdata: Path) -> None:
    path = realdata / "nvidia_smi" / "gpud" / "nvidia-smi-query.535.161.08.out.0.valid"
    snap = parse_nvidia_smi_text(path.read_text(), str(path))
    found = evaluate(counter_rules(), context(snap.observations, {}, NOW))
    assert {f.kind for f in found} == {"throttle"}
    assert len(found) == 8
    f = next(f for f in found if f.pci == "0000:19:00.0")
    assert f.message == "GPU 0000:19:00.0: clocks held down by hw_slowdown, hw_power_brake_slowdown"
    assert (f.severity, f.action, f.rule) == (Severity.WARNING, Action.NONE, "gpu.throttle-hw")


def test_remapped_rows_pending_excerpt_needs_a_reset(realdata: Path) -> None:
    path = realdata / "nvidia_smi" / "ml-engineering" / "nvidia-smi-q_a100_xid63_remapped_rows_pending_excerpt.txt"
    snap = parse_nvidia_smi_text(path.read_text(), str(path))
    found = {f.kind: f for f in evaluate(counter_rules(), context(snap.observations, {}, NOW))}
    assert found["row_remap_pending"].action is Action.RESET_GPU
    assert found["row_remap_pending"].pci == "0000:10:1c.0"
    # the excerpt holds 1 of the 8 attached GPUs
    assert found["gpu_missing"].message == "1 GPU(s) reported, but the driver says 8 are attached"


def test_a10g_idle_gen_drop_is_not_a_fault_but_x8_is(realdata: Path) -> None:
    path = realdata / "nvidia_smi" / "telegraf" / "a10g.xml"
    snap = parse_nvidia_smi_xml(path.read_bytes(), str(path))
    found = evaluate(counter_rules(), context(snap.observations, {}, NOW))
    assert [(f.rule, f.message) for f in found] == [
        ("gpu.pcie-width", "GPU 0000:00:1e.0: PCIe link x8, the GPU supports x16")]


def test_expected_gpus_and_driver_come_from_the_configuration(realdata: Path) -> None:
    path = realdata / "nvidia_smi" / "gpud" / "nvidia-smi-query.535.183.01.out.0.valid"
    snap = parse_nvidia_smi_text(path.read_text(), str(path))
    extra = {"node": {"expected_gpus": 8, "expected_driver": "550.90.07"}}
    kinds = {f.kind: f.message for f in evaluate(counter_rules(), context(snap.observations, {}, NOW, extra))}
    assert kinds["driver_mismatch"] == "driver 535.183.01 is loaded, 550.90.07 expected"
    assert "gpu_missing" not in kinds


def test_rates_use_the_previous_run_and_counter_resets_are_quiet(realdata: Path, tmp_path: Path) -> None:
    root = ib_tree(tmp_path, realdata / "infiniband" / "gpud" / "sys-class-infiniband-h100.0")
    snap = read_sysfs_ib(root)
    values = context(snap.observations, {}, NOW).values
    comp = "ib:mlx5_0/1"
    prev = {(comp, "symbol_error"): (0.0, NOW - 1800), (comp, "port_rcv_errors"): (20.0, NOW - 1800)}
    vals = {c: dict(v) for c, v in values.items()}
    vals[comp]["symbol_error"] = 30
    found = evaluate(counter_rules(), Context(vals, prev, NOW))
    sym = [f for f in found if f.kind == "ib_symbol_errors"]
    assert [(f.component, f.attrs["rate"]) for f in sym] == [(comp, 60.0)]
    # port_rcv_errors went from 20 to 14: a reset, not a negative rate
    assert not [f for f in found if f.kind == "ib_rcv_errors"]
    # the real snapshot's saturated link_downed counter on mlx5_1
    downed = [f for f in found if f.kind == "ib_link_downed"]
    assert [(f.component, f.attrs["value"]) for f in downed] == [("ib:mlx5_1/1", 255)]


def test_degraded_ib_port_against_its_hca_peers(realdata: Path, tmp_path: Path) -> None:
    root = ib_tree(tmp_path, realdata / "infiniband" / "gpud" / "sys-class-infiniband-h100.0")
    (root / "class/infiniband/mlx5_6/ports/1/rate").write_text("200 Gb/sec (2X NDR)")
    (root / "class/infiniband/mlx5_7/ports/1/state").write_text("1: DOWN")
    (root / "class/infiniband/mlx5_7/ports/1/phys_state").write_text("2: Polling")
    snap = read_sysfs_ib(root)
    found = evaluate(counter_rules(), context(snap.observations, {}, NOW))
    got = sorted((f.kind, f.component, f.action.label) for f in found if f.kind != "ib_link_downed")
    # the bond (BlueField-3, Ethernet 200G) is not compared with the ConnectX-7 ports
    assert got == [("ib_port_down", "ib:mlx5_7/1", "inspect"), ("ib_rate_degraded", "ib:mlx5_6/1", "inspect")]
    # the same port switched off by software (physical state Disabled) is shown, not alarmed on
    (root / "class/infiniband/mlx5_7/ports/1/phys_state").write_text("3: Disabled")
    snap = read_sysfs_ib(root)
    found = evaluate(counter_rules(), context(snap.observations, {}, NOW))
    got = sorted((f.kind, f.component, f.severity.label, f.action.label) for f in found
                 if f.component == "ib:mlx5_7/1")
    assert got == [("ib_port_disabled", "ib:mlx5_7/1", "info", "none")]


def test_rdma_transport_retries_on_the_real_snapshot(realdata: Path, tmp_path: Path) -> None:
    root = ib_tree(tmp_path, realdata / "infiniband" / "gpud" / "sys-class-infiniband-h100.0")
    snap = read_sysfs_ib(root)
    comp = "ib:mlx5_4/1"
    assert snap.value(comp, "hw_local_ack_timeout_err") == 0
    prev = {(comp, m): (0.0, NOW - 3600) for m in ("hw_local_ack_timeout_err", "hw_packet_seq_err",
                                                   "hw_out_of_sequence", "hw_rnr_nak_retry_err")}
    vals = {c: dict(v) for c, v in context(snap.observations, {}, NOW).values.items()}
    vals[comp]["hw_local_ack_timeout_err"] = 250
    found = [f for f in evaluate(counter_rules(), Context(vals, prev, NOW)) if f.kind == "ib_transport_errors"]
    assert [(f.component, f.attrs["rate"]) for f in found] == [(comp, 250.0)]

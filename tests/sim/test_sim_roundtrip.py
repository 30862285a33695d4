"""Round trip: every injected fault with a log/counter signature is found by minutiae's real
parsers and rules (no special cases), and the emitted formats have the real captures' shapes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from minutiae.scoring.explain import default_explains
from minutiae.scoring.score import Detection
from minutiae.scoring.truth import TruthEvent
from minutiae.sim.api import run_sim
from minutiae.sim.dataset import Dataset, load_dataset
from minutiae.sim.eval.run import run_detectors
from minutiae.sim.world.profile import load_profile

NODES, DAYS = 32, 1.0
GRACE = 1800.0


def _rates() -> dict[str, float]:
    """About two faults of every harmful class on 32 nodes in a day."""
    out = {}
    for f in load_profile().faults:
        if not f.harmful or f.unit == "fraction_of_nodes":
            continue
        exposure = NODES * DAYS * (8 if f.unit != "per_1000_node_days" else 1)
        out[f.cls] = 2.0 / exposure * 1000.0
    out["persistent_straggler"] = 0.1
    out["lemon_node"] = 0.0
    out["planned_reboot"] = 100.0
    return out


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dataset]:
    root = tmp_path_factory.mktemp("sim") / "fleet"
    run_sim(root, nodes=NODES, gpus_per_node=8, days=DAYS, seed=5, rates=_rates())
    yield load_dataset(root)


@pytest.fixture(scope="module")
def found(ds: Dataset) -> dict[str, list[Detection]]:
    return {r.name: list(r.detections) for r in run_detectors(ds) if r.available}


def _faults(ds: Dataset, sig: str) -> list[TruthEvent]:
    return [t for t in ds.truth if t.harmful and t.node is not None and sig in t.signature
            and t.cls != "lemon_node"]


def _hits(t: TruthEvent, dets: list[Detection], grace: float = GRACE) -> list[Detection]:
    return [d for d in dets if d.node == t.node and t.start - 60 <= d.time <= t.end + grace
            and t.cls in default_explains().of(d.key, d.kind)]


def _need(found: dict[str, list[Detection]], name: str) -> list[Detection]:
    if name not in found:
        pytest.skip(f"detector {name} not available in this build")
    return found[name]


def test_every_class_is_injected(ds: Dataset) -> None:
    classes = {t.cls for t in ds.truth if t.harmful and t.node}
    assert len(classes) >= 15, classes


def test_kernel_log_faults_found_by_the_kernel_log_rules(ds: Dataset, found: dict[str, list[Detection]]) -> None:
    dets = _need(found, "kernel_log")
    faults = [t for t in _faults(ds, "kern.log") if t.cls != "pcie_degraded"]
    assert len(faults) >= 10
    missed = [(t.cls, t.node) for t in faults if not _hits(t, dets, grace=5.0)]
    assert not missed


def test_ib_faults_found_by_the_counter_rules(ds: Dataset, found: dict[str, list[Detection]]) -> None:
    dets = _need(found, "ib_counters")
    faults = _faults(ds, "ib")
    assert len(faults) >= 4
    missed = [(t.cls, t.node, t.start) for t in faults if not _hits(t, dets)]
    assert not missed


def test_telemetry_faults_found_by_the_counter_rules(ds: Dataset, found: dict[str, list[Detection]]) -> None:
    dets = _need(found, "telemetry")
    faults = [t for t in _faults(ds, "telemetry") if t.cls != "persistent_straggler"]
    assert len(faults) >= 4
    missed = [(t.cls, t.node, t.start) for t in faults if not _hits(t, dets)]
    assert not missed


def test_slow_nodes_are_slow_in_the_timings(ds: Dataset) -> None:
    """Each persistent straggler's ranks run ~slowdown slower than the job's other ranks."""
    checked = 0
    # jobs logging wait-included totals (every rank waited for the slowest): the slow node's
    # ranks take the job's step time, so their own ratio is 1 by construction (checked below)
    waiting = {str(t.details.get("job_id")) for t in ds.truth if t.cls == "wait_included_totals"}
    for t in (t for t in ds.truth if t.cls == "persistent_straggler"):
        for job in ds.jobs:
            if t.node not in job.nodes or len(job.nodes) < 4 or not ds.timings_path(job.job_id).is_file():
                continue
            df = pl.read_parquet(ds.timings_path(job.job_id))
            if str(job.job_id) in waiting:
                mine = df.filter(pl.col("node") == t.node)["seconds"].median()
                rest = df.filter(pl.col("node") != t.node)["seconds"].median()
                assert mine / rest == pytest.approx(1.0, abs=0.005)  # type: ignore[operator]
                continue
            slow_nodes = {s.node for s in ds.truth if s.node in job.nodes and
                          float(s.details.get("slowdown", 0)) > 0 and s.start < job.end and s.end > job.start}
            mine = df.filter(pl.col("node") == t.node)
            peers = df.filter(~pl.col("node").is_in(list(slow_nodes)))
            for stage in mine["stage"].unique().to_list():   # same pipeline stage: same work
                a = mine.filter(pl.col("stage") == stage)["seconds"].median()
                b = peers.filter(pl.col("stage") == stage)["seconds"].median()
                if b is None:
                    continue
                assert a / b == pytest.approx(1 + float(t.details["slowdown"]), abs=0.015)  # type: ignore[operator]
                checked += 1
    assert checked >= 1


# ---------------------------------------------------------------- shapes of the real captures
PREFIXES = {
    "dmesg -T": re.compile(r"^\[(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\] \s*\S"),
    "iso decode": re.compile(r"^(kern|daemon)\s*:(emerg|alert|crit|err|warn|notice|info|debug)\s*: "
                             r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{6}\+00:00 \s*\S"),
    "iso": re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{6}\+00:00 \s*\S"),
    "journalctl short-iso": re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0000 \S+ kernel: \s*\S"),
    "syslog": re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: \[\s*\d+\.\d{6}\] \s*\S"),
}
REAL = {
    "dmesg -T": "kernel_logs/gpud/components_accelerator_nvidia_xid__dmesg-with-xid-119.log",
    "iso decode": "kernel_logs/gpud/pkg_dmesg__dmesg.decode.iso.log.0",
    "iso": "kernel_logs/gpud/components_query_log_tail__dmesg.0.log",
    "journalctl short-iso": "kernel_logs/gpud/pkg_dmesg__journalctl-time-format-short-iso-2.log",
}
XID = re.compile(r"NVRM: Xid \(PCI:[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\): (\d+), pid=('<unknown>'|\d+), "
                 r"name=(<unknown>|[\w.-]+), \S")


def test_prefix_patterns_match_the_real_captures(realdata: Path) -> None:
    for style, rel in REAL.items():
        lines = (realdata / rel).read_text().splitlines()
        assert all(PREFIXES[style].match(ln) for ln in lines if ln.strip()), rel


def test_every_node_log_has_one_real_prefix_style(ds: Dataset) -> None:
    styles = set()
    for node in ds.nodes:
        lines = (ds.node_dir(node) / "kern.log").read_text().splitlines()
        assert lines
        style = {s for s, rx in PREFIXES.items() if rx.match(lines[0])} - ({"iso"} if
                                                                           PREFIXES["iso decode"].match(lines[0]) else set())
        assert len(style) == 1, lines[0]
        (s,) = style
        assert all(PREFIXES[s].match(ln) for ln in lines), node
        styles.add(s)
    assert styles == set(PREFIXES)


def test_xid_lines_have_the_real_shape(ds: Dataset, realdata: Path) -> None:
    real = [ln for p in (realdata / "kernel_logs").rglob("*") if p.is_file()
            for ln in p.read_text(errors="replace").splitlines() if "NVRM: Xid" in ln]
    assert real and all(XID.search(ln) for ln in real)
    ours = [ln for n in ds.nodes for ln in (ds.node_dir(n) / "kern.log").read_text().splitlines()
            if "NVRM: Xid" in ln]
    codes = {int(XID.search(ln).group(1)) for ln in ours}  # type: ignore[union-attr]
    assert all(XID.search(ln) for ln in ours)
    assert {79, 74, 95, 48, 63, 94, 64, 119} <= codes


def test_sysfs_tree_has_the_real_layout(ds: Dataset, realdata: Path) -> None:
    real = realdata / "infiniband/gpud/sys-class-infiniband-h100.0/mlx5_0"
    ours = ds.node_dir(ds.nodes[0]) / "sysfs/class/infiniband/mlx5_0"
    rel = lambda root: {str(p.relative_to(root)) for p in root.rglob("*")}  # noqa: E731
    assert rel(ours) == rel(real)
    for f in ("ports/1/state", "ports/1/phys_state", "ports/1/rate", "ports/1/link_layer", "hca_type",
              "board_id"):
        # (the capture's copies lost sysfs's trailing newline)
        assert (ours / f).read_text() == (real / f).read_text().rstrip("\n") + "\n", f
    fw = (ours / "fw_ver").read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", fw)


def test_sysfs_snapshot_is_the_last_ib_sample(ds: Dataset) -> None:
    from minutiae.node.sources.ib.read_sysfs import read_sysfs_ib

    node = next(t.node for t in ds.truth if t.cls == "ib_symbol_errors" and t.node)
    snap = read_sysfs_ib(ds.node_dir(node) / "sysfs", 0.0)
    got = {(o.component, o.metric): o.value for o in snap.observations}
    last: dict[tuple[str, str], str] = {}
    for row in pl.read_csv(ds.node_dir(node) / "ib.csv").iter_rows(named=True):
        last[(f"ib:{row['device']}/{row['port']}", row["counter"])] = str(row["value"])
    for (comp, counter), value in last.items():
        if counter == "symbol_error":
            assert got[(comp, "symbol_error")] == int(value)
        if counter == "state":
            assert got[(comp, "state")] == value.split(": ")[1]
    assert max(int(v) for (c, k), v in last.items() if k == "symbol_error") > 0


def test_dcgm_text_round_trips_through_the_dcgm_parser(ds: Dataset) -> None:
    from minutiae.node.sources.dcgm.parse import parse_dcgm
    from minutiae.sim.emit.telemetry import render_dcgm

    df = pl.read_parquet(ds.root / "telemetry.parquet").filter(pl.col("ecc_sbe") > 0).head(1)
    row = df.row(0, named=True)
    rows = pl.read_parquet(ds.root / "telemetry.parquet").filter(
        (pl.col("node") == row["node"]) & (pl.col("time") == row["time"])).to_dicts()
    snap = parse_dcgm(render_dcgm(rows), "rendered")
    vals = {(o.component, o.metric): o.value for o in snap.observations}
    assert vals[("node", "gpu_count")] == len(rows)
    from minutiae.sim.world.fleet import gpu_bus

    for r in rows:
        comp = f"gpu:0000:{gpu_bus(r['gpu'])}:00.0"
        assert vals[(comp, "ecc_sbe_volatile")] == r["ecc_sbe"]
        assert vals[(comp, "temperature_c")] == pytest.approx(r["temp_c"])
        assert vals[(comp, "clock_event_reasons")] == r["clock_event_reasons"]
    assert not snap.problems


def test_dcgm_field_names_are_real(realdata: Path) -> None:
    from minutiae.sim.emit.telemetry import DCGM_FIELDS

    text = "".join(p.read_text() for p in (realdata / "dcgm/dcgm-exporter").glob("*.csv"))
    names = [f for f, _t, _h in DCGM_FIELDS.values()]
    # every field but the clock-events bitmask is listed by dcgm-exporter's own CSVs
    assert [n for n in names if n not in text] == ["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]


def test_boot_minutes_show_ib_ports_settling(ds: Dataset) -> None:
    """After a planned reboot the ports are DOWN/Polling (then INIT) before ACTIVE (must not alarm)."""
    for t_boot, node, _what in ds.maintenance:
        rows = pl.read_csv(ds.node_dir(node) / "ib.csv").filter(pl.col("counter") == "state")
        near = rows.filter((pl.col("time") >= t_boot) & (pl.col("time") <= t_boot + 1200))
        states = set(near["value"].to_list())
        assert {"1: DOWN", "4: ACTIVE"} <= states   # INIT lasts less than a sample
        return
    pytest.skip("no planned reboot in this fleet")


def test_telemetry_is_consistent(ds: Dataset) -> None:
    df = pl.read_parquet(ds.root / "telemetry.parquet")
    per = df.group_by("node").len()
    expected = int(DAYS * 86400 / 300) * 8
    off = {t.node for t in ds.truth if t.cls == "gpu_off_bus"}
    full = per.filter(~pl.col("node").is_in(list(off)))
    assert (full["len"] == expected).all()
    assert per.filter(pl.col("node").is_in(list(off)))["len"].max() < expected  # type: ignore[operator]
    busy = df.filter(pl.col("clock_event_reasons") & 1 == 0)
    idle = df.filter(pl.col("clock_event_reasons") & 1 == 1)
    assert busy["sm_clock_mhz"].median() > 1900 and idle["sm_clock_mhz"].median() < 400  # type: ignore[operator]
    assert busy["power_w"].median() > 5 * idle["power_w"].median()  # type: ignore[operator]
    hot = {t.node for t in ds.truth if t.cls == "thermal_throttle"}
    assert df.filter(pl.col("node").is_in(list(hot)) & (pl.col("temp_c") > 85)).height > 0
    assert df.filter(~pl.col("node").is_in(list(hot)))["temp_c"].max() < 80  # type: ignore[operator]

"""slownodes: peer comparison of passive telemetry with known injected slow GPUs/nodes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from minutiae.analyses.slownodes.analysis import SlowOptions, analyse_telemetry, decode_reasons
from minutiae.cli.main import main

T0 = 1_767_225_600.0
STEP = 300.0
HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, SW_POWER_CAP, IDLE = 0x8, 0x20, 0x40, 0x4, 0x1


def fleet_telemetry(seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    nodes = [f"gpu{i:03d}" for i in range(1, 17)]
    times = T0 + STEP * np.arange(72)  # 6 h
    n_t, n_g = times.size, 8
    rows = []
    for node in nodes:
        clock = 1980 + rng.normal(0, 8, (n_t, n_g))
        temp = 63 + rng.normal(0, 2, (n_t, n_g))
        power = 640 + rng.normal(0, 15, (n_t, n_g))
        reasons = np.where(rng.random((n_t, n_g)) < 0.03, SW_POWER_CAP, 0)
        xmit = 160_000 * rng.uniform(0.95, 1.05, (n_t, n_g))
        replay = np.zeros((n_t, n_g))
        if node == "gpu003":                      # persistent straggler: whole node, no reason
            clock /= 1.09
        if node == "gpu007":                      # thermal throttle, GPU 3, 40 min from +2 h
            win = slice(24, 32)
            clock[win, 3] /= 1.125
            temp[win, 3] = 89
            reasons[win, 3] |= HW_SLOWDOWN | SW_THERMAL | HW_THERMAL
        if node == "gpu010":                      # a retrying PCIe link at full SM clock
            replay[:, 5] = np.cumsum(rng.poisson(20, n_t))
        if node == "gpu012":                      # NIC rail 1 sends 40 % less for 1 h
            xmit[36:48, 1] *= 0.6
        if node == "gpu001":                      # a 10-minute dip: not persistent
            clock[10:12, 2] /= 1.2
        if node == "gpu014":                      # idle for 3 h: low clock, GpuIdle
            clock[:36] = 345
            reasons[:36] = IDLE
        if node in ("gpu015", "gpu016", "gpu013", "gpu011"):   # another job, power-capped lower
            clock *= 0.88
        for g in range(n_g):
            rows.append(pl.DataFrame({
                "time": times, "node": node, "gpu": g, "sm_clock_mhz": clock[:, g].round(),
                "power_w": power[:, g], "temp_c": temp[:, g].round(),
                "clock_event_reasons": reasons[:, g].astype(np.int64),
                "pcie_replay": replay[:, g].astype(np.int64), "nvlink_errors": 0,
                "ib_xmit_mbps": xmit[:, g]}))
    tel = pl.concat(rows)
    fleet = pl.DataFrame({"node": nodes, "rack": [f"r{(i - 1) // 8}" for i in range(1, 17)],
                          "sku": "H100-SXM5"})
    jobs = pl.DataFrame({"job_id": ["7", "8"], "start": [str(T0 - 60), str(T0 - 60)],
                         "end": [str(T0 + 86_400)] * 2,
                         "nodes": [" ".join(n for n in nodes if n not in ("gpu011", "gpu013", "gpu015", "gpu016")),
                                   "gpu011 gpu013 gpu015 gpu016"]})
    return tel, fleet, jobs


def test_finds_exactly_the_injected_ones_with_evidence() -> None:
    tel, fleet, jobs = fleet_telemetry()
    report = analyse_telemetry(tel, fleet, jobs)
    got = {(f.node, f.gpu, f.scope, f.metric) for f in report.findings}
    # the thermal throttle is also seen by the thermal model (26 C above its peers at the same power)
    assert got == {("gpu003", None, "node", "sm_clock"), ("gpu007", 3, "gpu", "sm_clock"),
                   ("gpu007", 3, "gpu", "thermal"),
                   ("gpu012", 1, "link", "ib_xmit"), ("gpu010", 5, "gpu", "pcie_replay")}
    by = {(f.node, f.metric): f for f in report.findings}
    thermal = by[("gpu007", "sm_clock")]
    assert thermal.duration_s == pytest.approx(40 * 60)
    assert thermal.deficit == pytest.approx(0.111, abs=0.01)
    assert thermal.reasons == ("HW slowdown", "SW thermal slowdown", "HW thermal slowdown")
    assert thermal.evidence.startswith("GPU 3 on node gpu007 ran 11% below its peers' SM clock "
                                       "for 40 min, HW slowdown, SW thermal slowdown, HW thermal "
                                       "slowdown active, +26 C vs peers")
    assert thermal.start == T0 + 24 * STEP and thermal.time == thermal.start + 1800
    node = by[("gpu003", "sm_clock")]
    assert node.evidence.startswith("all 8 GPUs on node gpu003 ran 8% below their peers' SM clock "
                                    "for 6.0 h, no clock-event reason reported")
    replay = by[("gpu010", "pcie_replay")]
    assert replay.pcie_replays_per_hour == pytest.approx(240, rel=0.15)
    assert replay.evidence.startswith("GPU 5 on node gpu010 logged 2")
    assert "PCIe replays/h for 5.9 h" in replay.evidence and abs(replay.deficit) < 0.01
    link = by[("gpu012", "ib_xmit")]
    assert link.deficit == pytest.approx(0.4, abs=0.03) and link.duration_s == 3600
    assert 0.002 < report.noise < 0.006


def test_peers_are_the_same_job_else_more_false_alarms() -> None:
    tel, fleet, jobs = fleet_telemetry()
    without_jobs = analyse_telemetry(tel, fleet, None)
    nodes = {f.node for f in without_jobs.findings if f.scope == "node"}
    assert {"gpu011", "gpu013"} <= nodes  # the power-capped job looks slow against the rack


def test_options_and_decoding() -> None:
    tel, fleet, jobs = fleet_telemetry()
    short = analyse_telemetry(tel, fleet, jobs, SlowOptions(min_duration=600))
    assert ("gpu001", 2) in {(f.node, f.gpu) for f in short.findings}
    assert decode_reasons(0x48) == ["HW slowdown", "HW thermal slowdown"]


def test_cli_on_a_dataset_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tel, fleet, jobs = fleet_telemetry()
    tel.write_parquet(tmp_path / "telemetry.parquet")
    fleet.write_csv(tmp_path / "fleet.csv")
    jobs.write_csv(tmp_path / "jobs.csv")
    rc = main(["slownodes", str(tmp_path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["gpus"] == 128 and doc["nodes"] == 16
    first = doc["suspects"][0]
    assert {"node", "gpu", "scope", "metric", "deficit", "evidence", "start", "end"} <= set(first)
    assert {s["node"] for s in doc["suspects"]} == {"gpu003", "gpu007", "gpu010", "gpu012"}
    rc = main(["slownodes", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1 and "- GPU 3 on node gpu007 ran 11% below" in out


@pytest.mark.parametrize(("setup", "message"), [
    (lambda d: None, "missing telemetry file"),
    (lambda d: (d / "telemetry.parquet").write_bytes(b"PAR1garbage"), "unreadable telemetry"),
    (lambda d: pl.DataFrame({"time": [1.0], "node": ["a"]}).write_parquet(d / "telemetry.parquet"),
     "missing column(s) gpu, sm_clock_mhz"),
    (lambda d: (pl.DataFrame({"time": [1.0], "node": ["a"], "gpu": [0], "sm_clock_mhz": [1.0]})
                .write_parquet(d / "telemetry.parquet"), (d / "jobs.csv").write_text("x,y\n1,2\n")),
     "needs columns nodes, start, end, job_id"),
])
def test_bad_datasets(tmp_path: Path, capsys: pytest.CaptureFixture[str], setup, message: str) -> None:  # type: ignore[no-untyped-def]
    setup(tmp_path)
    rc = main(["slownodes", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 3 and message in err and str(tmp_path) in err and "Traceback" not in err


def test_needs_exactly_one_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["slownodes"]) == 3
    assert "one of them" in capsys.readouterr().err


def test_all_idle_is_not_ok_but_said() -> None:
    tel, _, _ = fleet_telemetry()
    idle = tel.with_columns(pl.lit(IDLE).alias("clock_event_reasons"))
    report = analyse_telemetry(idle)
    assert report.findings == () and report.warnings == ("no busy samples: nothing to compare",)


@pytest.mark.parametrize("chunk_rows", [1, 700, 2_000])
@pytest.mark.parametrize("variant", ["jobs", "no_jobs", "short"])
def test_chunked_gives_the_whole_table_answer(chunk_rows: int, variant: str) -> None:
    # chunks hold whole sample times (1 row -> one time per chunk; 700 -> a few; 9,216 rows in all)
    tel, fleet, jobs = fleet_telemetry(seed=3)
    args = (tel, fleet, None if variant == "no_jobs" else jobs,
            SlowOptions(min_duration=600) if variant == "short" else None)
    whole = analyse_telemetry(*args, chunk_rows=None)
    chunked = analyse_telemetry(*args, chunk_rows=chunk_rows)
    assert whole.findings and len(whole.findings) >= 4
    assert chunked.to_json() == whole.to_json()
    assert chunked.noise == whole.noise and chunked.samples == whole.samples == 9216 - 36 * 8


def test_chunk_numbers_keep_each_sample_time_whole() -> None:
    from minutiae.analyses.slownodes.chunked import chunk_numbers

    # jittered times: 1,000 s and 1,020 s share bucket 3 at a 300 s interval (3.33 and 3.4 round to 3)
    times = pl.Series([0.0, 290.0, 610.0, 1000.0, 1020.0, 1190.0])
    chunk, count = chunk_numbers(times, 300.0, chunk_rows=1)
    assert chunk.tolist() == [0, 1, 2, 3, 3, 4] and count == 5
    chunk, count = chunk_numbers(times, 300.0, chunk_rows=None)
    assert chunk.tolist() == [0] * 6 and count == 1
    # half to even, as the analysis' buckets: 450 s is bucket 2 (1.5), 750 s bucket 2 (2.5)
    chunk, _ = chunk_numbers(pl.Series([0.0, 450.0, 750.0, 1050.0]), 300.0, chunk_rows=1)
    assert chunk.tolist() == [0, 2, 2, 4]


def test_of_two_equally_long_episodes_the_earlier_is_reported() -> None:
    tel, fleet, jobs = fleet_telemetry()
    idx = pl.int_range(pl.len()).over("node", "gpu")      # sample number of each GPU's series
    dip = (pl.col("node") == "gpu005") & (pl.col("gpu") == 2) & (idx.is_between(10, 17) | idx.is_between(40, 47))
    tel = tel.sort("node", "gpu", "time").with_columns(
        pl.when(dip).then((pl.col("sm_clock_mhz") / 1.125).round()).otherwise(pl.col("sm_clock_mhz"))
        .alias("sm_clock_mhz"))
    for _ in range(3):
        got = [f for f in analyse_telemetry(tel, fleet, jobs).findings if f.node == "gpu005"]
        assert sorted((f.gpu, f.start, f.end) for f in got) == [
            (2, T0 + 10 * STEP, T0 + 18 * STEP), (2, T0 + 40 * STEP, T0 + 48 * STEP)]


@pytest.mark.parametrize("chunk_rows", [None, 500])
def test_a_healthy_fleet_has_no_suspects(chunk_rows: int | None) -> None:
    tel, fleet, jobs = fleet_telemetry()
    healthy = ~pl.col("node").is_in(["gpu003", "gpu007", "gpu010", "gpu012", "gpu001"])
    report = analyse_telemetry(tel.filter(healthy), fleet, jobs, chunk_rows=chunk_rows)
    assert report.findings == () and report.nodes == 11 and report.gpus == 88 and report.warnings == ()


def test_a_side_table_is_read_bounded_with_its_columns_checked(tmp_path: Path) -> None:
    from minutiae.analyses.slownodes.read import FLEET_COLUMNS, JOBS_COLUMNS, read_side_table
    from minutiae.errors import DataError, InputError

    fleet = tmp_path / "fleet.csv"
    fleet.write_text("node,sku,rack\nn1,h100,r1\n")
    assert read_side_table(fleet, "fleet CSV", FLEET_COLUMNS)["sku"].to_list() == ["h100"]
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,start,end\n1,0,10\n")  # no nodes column: named, not a polars traceback
    with pytest.raises(DataError, match=r"jobs\.csv: a jobs CSV needs columns .*\(missing: nodes\)"):
        read_side_table(jobs, "jobs CSV", JOBS_COLUMNS)
    (tmp_path / "nul.csv").write_bytes(b"node\n\0\0\n")
    with pytest.raises(InputError, match="binary data"):
        read_side_table(tmp_path / "nul.csv", "fleet CSV", FLEET_COLUMNS)
    (tmp_path / "bad.csv").write_bytes(b"(\xb5/\xfdnode\n")  # zstd's magic: polars would inflate it
    with pytest.raises(InputError, match="unreadable fleet CSV"):
        read_side_table(tmp_path / "bad.csv", "fleet CSV", FLEET_COLUMNS)

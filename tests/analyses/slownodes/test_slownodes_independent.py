"""slownodes on an independent fleet (minutiae.testing.telemetry_fleet: its own physics, not the
simulator's): every injected thermal, power, clock and whole-node fault found by the signal
that should find it, no false alarm, every gap and absent node reported UNKNOWN."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from minutiae.analyses.slownodes.analysis import analyse_telemetry
from minutiae.cli.main import main
from minutiae.testing.fleet_score import observable, score
from minutiae.testing.telemetry_fleet import make_fleet, write_dataset


@pytest.fixture(scope="module")
def fleet():  # type: ignore[no-untyped-def]
    return make_fleet(seed=7)


def test_all_faults_found_no_false_alarm_every_gap(fleet) -> None:  # type: ignore[no-untyped-def]
    r = analyse_telemetry(fleet.telemetry, fleet.fleet, fleet.jobs)
    s = score(observable(fleet), list(r.findings), list(r.unknown))
    assert not s.missed, s.missed
    assert s.false_alarms == ()
    assert not s.gaps_missed, s.gaps_missed
    kinds = {f.kind for f in s.found}
    assert kinds == {"thermal", "power", "clock", "node"}
    # the whole-node fault sits in a 1-node job: found against the same SKU across the fleet
    node = next(f for f in r.findings if f.scope == "node")
    assert node.node == "gn017" and node.evidence.startswith("all 8 GPUs on node gn017")
    # a fault that outlives job changes is reported from its start (within one sample)
    assert max(s.delays_s) <= 2 * fleet.interval
    by = {(u.node, u.gpu): u for u in r.unknown}
    assert by[("gn063", None)].reason == "absent"
    assert by[("gn033", None)].end - by[("gn033", None)].start == pytest.approx(8 * 3600)
    assert ("gn044", 3) in by


def test_without_the_new_signals_they_are_missed(fleet) -> None:  # type: ignore[no-untyped-def]
    """The scorer can fail: the clock-only view of the same data misses thermal and power."""
    tel = fleet.telemetry.drop("util", "temp_c", "power_w")
    r = analyse_telemetry(tel, fleet.fleet, fleet.jobs)
    s = score(observable(fleet), list(r.findings), list(r.unknown))
    assert {f.kind for f in s.missed} == {"thermal", "power"}


def test_chunked_is_the_same_report(fleet) -> None:  # type: ignore[no-untyped-def]
    whole = analyse_telemetry(fleet.telemetry, fleet.fleet, fleet.jobs, chunk_rows=None)
    small = analyse_telemetry(fleet.telemetry, fleet.fleet, fleet.jobs, chunk_rows=30_000)
    # thermal candidates are picked with each chunk's own fit; the episodes use the fleet's
    assert whole.to_json()["unknown"] == small.to_json()["unknown"]
    assert [(f.node, f.gpu, f.metric, f.start, f.end) for f in whole.findings] == [
        (f.node, f.gpu, f.metric, f.start, f.end) for f in small.findings]


def test_node_finding_counts_its_gpus(fleet) -> None:  # type: ignore[no-untyped-def]
    from minutiae.testing.telemetry_fleet import default_faults

    names = [f"gn{i:03d}" for i in range(64)]
    faults = tuple(f for f in default_faults(names, 2 * 86400) if f.kind != "node")
    f = make_fleet(seed=7, faults=faults)
    seven = (pl.col("node") == "gn017") & (pl.col("gpu") < 7) & pl.col("time").is_between(
        f.telemetry["time"].min() + 12 * 3600, f.telemetry["time"].min() + 20 * 3600)  # type: ignore[operator]
    tel = f.telemetry.with_columns(pl.when(seven).then(pl.col("sm_clock_mhz") * 0.9)
                                   .otherwise(pl.col("sm_clock_mhz")).alias("sm_clock_mhz"))
    r = analyse_telemetry(tel, f.fleet, f.jobs)
    node = [x for x in r.findings if x.scope == "node" and x.node == "gn017"]
    assert node and node[0].evidence.startswith("7 of 8 GPUs on node gn017"), node


def test_cli_reports_unknown_windows(fleet, tmp_path: Path,  # type: ignore[no-untyped-def]
                                     capsys: pytest.CaptureFixture[str]) -> None:
    write_dataset(fleet, str(tmp_path))
    assert main(["slownodes", str(tmp_path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert {(u["node"], u["reason"]) for u in out["unknown"]} >= {("gn063", "absent"), ("gn033", "gap")}
    assert all(u["status"] == "UNKNOWN" for u in out["unknown"])
    assert main(["slownodes", str(tmp_path)]) == 1
    text = capsys.readouterr().out
    assert "UNKNOWN: node gn033 sent no telemetry for 8.0 h" in text
    assert "UNKNOWN: node gn063 never reported" in text


def test_small_job_without_fleet_peers_is_judged_on_its_own_history(fleet) -> None:  # type: ignore[no-untyped-def]
    """gn017's SKU made unique: no fleet group but itself, so its 1-node job is compared with
    the GPUs' own busy clock history (power-capped samples left out of both)."""
    fl = fleet.fleet.with_columns(pl.when(pl.col("node") == "gn017").then(pl.lit("H100-NVL"))
                                  .otherwise(pl.col("sku")).alias("sku"))
    r = analyse_telemetry(fleet.telemetry, fl, fleet.jobs)
    s = score(observable(fleet), list(r.findings), list(r.unknown))
    assert not s.missed and s.false_alarms == ()
    assert any(f.scope == "node" and f.node == "gn017" for f in r.findings)


@pytest.fixture(scope="module")
def real_fleet():  # type: ignore[no-untyped-def]
    """The realistic fleet (workload power intensity, slot temperatures, jittered time stamps,
    lost scrapes, …) with faults drawn from a seed not used while developing the analysis."""
    from minutiae.testing.telemetry_fleet import Physics, _nodes, random_faults

    names, skus, _ = _nodes(64)
    return make_fleet(seed=4242, faults=random_faults(4242, names, skus, 2 * 86400), physics=Physics())


def test_realistic_fleet_every_fault_no_false_alarm(real_fleet) -> None:  # type: ignore[no-untyped-def]
    r = analyse_telemetry(real_fleet.telemetry, real_fleet.fleet, real_fleet.jobs)
    obs = observable(real_fleet)
    s = score(obs, list(r.findings), list(r.unknown))
    assert {f.kind for f in obs} >= {"thermal", "power", "clock", "gap", "absent"}
    assert not s.missed, s.missed
    assert s.false_alarms == ()
    assert not s.gaps_missed, s.gaps_missed
    assert r.interval_s == pytest.approx(300, abs=1)  # per-series steps, not the jittered stamps


def test_realistic_fleet_breaks_the_clean_models_assumptions(real_fleet) -> None:  # type: ignore[no-untyped-def]
    """What the analysis may not assume, the realistic fleet has: power at full utilisation
    differs by workload (job), rear GPU slots run hotter, time stamps are not on one grid."""
    tel = real_fleet.telemetry
    busy = tel.filter(pl.col("util") >= 95)
    per_node = busy.group_by("node").agg(pl.col("power_w").median())["power_w"]
    assert per_node.quantile(0.9) / per_node.quantile(0.1) > 1.2  # type: ignore[operator]
    slot = tel.filter(pl.col("util") >= 50).group_by("gpu").agg((pl.col("temp_c") - 0.055 * pl.col("power_w"))
                                                                 .median().alias("t"))
    t = dict(slot.iter_rows())
    assert t[7] - t[0] > 3
    assert tel["time"].n_unique() > 10 * (tel["time"].max() - tel["time"].min()) / 300  # type: ignore[operator]

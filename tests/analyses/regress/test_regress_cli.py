"""CLI: JSON shape per DESIGN.md, human tables, bad-input messages (exit 3, path named)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minutiae.cli.main import main
from minutiae.history.export import format_rollouts_csv, format_runs_csv
from minutiae.testing.synth.regress import FleetConfig, RolloutSpec, synth_fleet


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    d = tmp_path_factory.mktemp("sim")
    f = synth_fleet(FleetConfig(seed=5, signatures=12, duplicates=2, twins=1, missing_version_rate=0.02,
                                future_runs=1, code_regression_rate=0.6, code_sizes=(0.03, 0.05, -0.04),
                                rollouts=(RolloutSpec("driver", 0.03, 0.6, 20.0, 3.0),
                                          RolloutSpec("nccl", 0.0, 0.8, 12.0, 4.0))))
    (d / "runs.csv").write_text(format_runs_csv(f.records))
    (d / "rollouts.csv").write_text(format_rollouts_csv(f.changes))
    return d, f


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:  # type: ignore[type-arg]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_regress_json_contract(dataset, capsys) -> None:  # type: ignore[no-untyped-def]
    d, f = dataset
    out = _json(capsys, ["regress", "--runs", str(d / "runs.csv"), "--json"])
    assert out["rollouts_from"] == str(d / "rollouts.csv")
    cps = out["change_points"]
    assert cps and all({"signature", "run_id", "change", "confidence", "p_value"} <= set(c) for c in cps)
    found = {(c["signature"], c["run_id"]) for c in cps}
    hits = 0
    for truth in f.code_changes:   # injected code regressions, reported at their first run (±2)
        series = sorted((r for r in f.records if r.signature == truth.signature), key=lambda r: r.time)
        ids = [r.run_id for r in series]
        i = ids.index(truth.run_id)
        hits += any((truth.signature, rid) in found for rid in ids[max(0, i - 2): i + 3])
    assert hits >= 0.8 * len(f.code_changes) and len(f.code_changes) >= 4
    drv = next(r for r in out["rollouts"] if r["attr"] == "driver")
    assert drv["cause"] is True and 0.02 < drv["effect"]["change"] < 0.04
    kinds = {i["kind"] for i in out["issues"]}
    assert {"duplicate", "missing_version", "clock_skew"} <= kinds


def test_regress_job_filter_and_human_output(dataset, capsys) -> None:  # type: ignore[no-untyped-def]
    d, f = dataset
    sig = f.records[0].signature
    out = _json(capsys, ["regress", "--runs", str(d / "runs.csv"), "--job", sig, "--json"])
    assert {c["signature"] for c in out["change_points"]} <= {sig}
    assert [s["signature"] for s in out["series"]] == [sig]
    assert main(["regress", "--runs", str(d / "runs.csv")]) == 0
    text = capsys.readouterr().out
    assert "Change points" in text and "Rollouts tested as causes" in text and "clock skew" in text


def test_whatchanged_and_impact_json(dataset, capsys) -> None:  # type: ignore[no-untyped-def]
    d, f = dataset
    runs = sorted(f.records, key=lambda r: r.time)
    a, b = runs[10].run_id, runs[-10].run_id
    out = _json(capsys, ["whatchanged", a, b, "--runs", str(d / "runs.csv"), "--json", "--top", "5"])
    assert out["run_a"]["run_id"] == a and out["run_b"]["run_id"] == b
    assert len(out["differences"]) <= 5 and out["differences"][0]["rank"] == 1
    imp = _json(capsys, ["impact", "--speedup", "0.8%", "--where", "NCCL>=2.21", "--runs",
                         str(d / "runs.csv"), "--json"])
    assert imp["runs_matched"] > 0 and imp["gpu_days_per_week"] > 0 and imp["speedup"] == 0.008


@pytest.mark.parametrize("argv,msg", [
    (["regress", "--runs", "/nonexistent/runs.csv"], "/nonexistent/runs.csv: no such file"),
    (["regress"], "give exactly one of --runs FILE, --db PATH or --prom URL"),
    (["regress", "--db", "/nonexistent/c.db"], "/nonexistent/c.db: no such database file"),
    (["impact", "--speedup", "lots", "--where", "nccl>=2", "--runs", "X"], "--speedup 'lots'"),
    (["regress", "--since", "fortnight", "--runs", "X"], "--since 'fortnight'"),
])
def test_bad_input_messages(argv: list[str], msg: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


def test_bad_where_and_unknown_run(dataset, capsys) -> None:  # type: ignore[no-untyped-def]
    d, _ = dataset
    assert main(["impact", "--speedup", "1%", "--where", "NCL>=2.21", "--runs", str(d / "runs.csv")]) == 3
    assert "unknown attribute 'NCL'" in capsys.readouterr().err
    assert main(["whatchanged", "zzz", "r000001", "--runs", str(d / "runs.csv")]) == 3
    assert "not in the history: zzz" in capsys.readouterr().err


def test_garbage_file_is_a_message(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "runs.csv"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    assert main(["regress", "--runs", str(p)]) == 3
    assert f"{p}: " in capsys.readouterr().err


def test_db_round_trip_through_cli(dataset, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from minutiae.history.read import import_runs

    d, _ = dataset
    n, _issues = import_runs(d / "runs.csv", tmp_path / "c.db")
    assert n > 100
    a = _json(capsys, ["regress", "--runs", str(d / "runs.csv"), "--json"])
    b = _json(capsys, ["regress", "--db", str(tmp_path / "c.db"), "--json"])
    assert [c["run_id"] for c in a["change_points"]] == [c["run_id"] for c in b["change_points"]]


def test_simulator_layout_joins_jobs_csv(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """docs/dataset.md: runs.csv carries a node count; jobs.csv (job_id = run_id) the node names,
    world size and start/end; rollouts.csv the per-node changes."""
    f = synth_fleet(FleetConfig(seed=9, signatures=20, rollouts=(RolloutSpec("driver", 0.03, 0.6, 20.0, 3.0),)))
    runs = ["run_id,time,signature,seconds_per_step,driver,kernel,firmware,nccl,nodes"]
    jobs = ["job_id,start,end,nodes,signature,world_size,ranks_per_node,outcome"]
    for r in f.records:
        sig = r.signature.split("-ws")[0]          # signature without the world size, as the sim writes
        runs.append(f"{r.run_id},{r.time:.0f},{sig},{r.value:.5f},{max(r.attrs['driver'])},"
                    f"{r.attr_text('kernel')},{r.attr_text('firmware')},{r.attr_text('nccl')},{len(r.nodes)}")
        jobs.append(f"{r.run_id},{r.time:.0f},{r.time + (r.duration_s or 0):.0f},{' '.join(r.nodes)},{sig},"
                    f"{r.gpus},8,completed")
    (tmp_path / "runs.csv").write_text("\n".join(runs) + "\n")
    (tmp_path / "jobs.csv").write_text("\n".join(jobs) + "\n")
    (tmp_path / "rollouts.csv").write_text(format_rollouts_csv(f.changes))
    out = _json(capsys, ["regress", "--runs", str(tmp_path / "runs.csv"), "--json"])
    kinds = {i["kind"]: i["message"] for i in out["issues"]}
    assert f"of {len(f.records)} run(s) taken from" in kinds["joined"]
    drv = out["rollouts"][0]
    assert drv["attr"] == "driver" and drv["cause"] and drv["gpu_hours_per_week"] > 0
    assert drv["overlap"] >= 20
    imp = _json(capsys, ["impact", "--speedup", "1%", "--where", "driver>=570.158", "--runs",
                         str(tmp_path / "runs.csv"), "--json"])
    assert imp["runs_matched"] > 0 and imp["runs_without_usage"] == 0


def test_absurd_times_are_notes_not_tracebacks(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "runs.csv"
    rows = ["run_id,time,signature,seconds_per_step"]
    rows += [f"a{i},{-1e13 if i == 0 else 1767225600 + i * 3600},s,{1.0 + (i > 20) * 0.05 + 0.001 * (i % 3)}"
             for i in range(40)]
    p.write_text("\n".join(rows) + "\n")
    assert main(["regress", "--runs", str(p)]) == 0
    out = capsys.readouterr().out
    assert "dated before 2000" in out and "Traceback" not in out
    assert main(["whatchanged", "a0", "a39", "--runs", str(p)]) == 0

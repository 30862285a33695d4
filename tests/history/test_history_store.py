"""Run history: CSV reader (tolerant, hypothesis), hygiene messages, SQLite round trip."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import DataError, InputError, MinutiaeError, ParseError
from minutiae.history.clean import clean_runs
from minutiae.history.issues import IssueKind
from minutiae.history.parse import expand_nodes, parse_runs_csv, parse_time
from minutiae.history.read import load_history, read_runs_file
from minutiae.history.record import Metric, RunRecord
from minutiae.history.store import RunStore, record_run

CSV = """run_id,time,signature,seconds_per_step,driver,nccl,nodes,gpus,duration_s
a1,1767225600,llama,1.50,570.124.06,2.21.5,gpu[001-002],16,3600
a2,2026-01-01T02:00:00Z,llama,1.52,570.124.06 570.158.01,2.21.5,"gpu001,gpu003",16,7200
a3,1767232800,llama,1.49,,2.21.5,gpu004,8,
a3,1767232800,llama,1.49,,2.21.5,gpu004,8,
a4,1767236400,llama,-1,570.124.06,2.21.5,gpu004,8,60
a5,1767236400,solo,2.0,570.124.06,2.21.5,gpu005,8,60
"""


def test_csv_rows_attributes_and_hostlists() -> None:
    load = parse_runs_csv(CSV, "runs.csv")
    ids = [r.run_id for r in load.records]
    assert ids == ["a1", "a2", "a3", "a3", "a5"]
    a1, a2, a3 = load.records[:3]
    assert a1.nodes == ("gpu001", "gpu002") and a1.gpu_hours() == 16.0
    assert a2.time == 1767225600 + 7200
    assert a2.attrs["driver"] == {"570.124.06", "570.158.01"} and a2.nodes == ("gpu001", "gpu003")
    assert a3.attrs["driver"] == frozenset() and a3.gpu_hours() is None
    (bad,) = [i for i in load.issues if i.kind is IssueKind.BAD_ROW]
    assert bad.message.startswith("runs.csv:6:") and "seconds_per_step" in bad.message


def test_hygiene_messages() -> None:
    load = parse_runs_csv(CSV, "runs.csv")
    runs, issues = clean_runs(load.records, now=1767225600 + 3600, columns=load.columns)
    kinds = {i.kind: i for i in issues}
    assert kinds[IssueKind.DUPLICATE].run_ids == ("a3",)
    assert "solo" in kinds[IssueKind.SINGLE_RUN].message
    assert kinds[IssueKind.MISSING_VERSION].message.startswith("driver missing on 1 of")
    # a2, a3 and a5 are stamped after now + 5 min: clock skew, left out and named
    skew = kinds[IssueKind.CLOCK_SKEW]
    assert set(skew.run_ids) == {"a2", "a3", "a5"} and [r.run_id for r in runs] == ["a1"]


def test_conflicting_duplicate_and_twin() -> None:
    r = RunRecord("x", 1e9, "s", 1.0, nodes=("n1",))
    runs, issues = clean_runs([r, RunRecord("x", 1e9, "s", 2.0), RunRecord("y", 1e9, "s", 1.0, nodes=("n1",))])
    assert [x.run_id for x in runs] == ["x"]
    assert {i.kind for i in issues} == {IssueKind.CONFLICT, IssueKind.DUPLICATE, IssueKind.SINGLE_RUN}


@pytest.mark.parametrize("text,msg", [
    ("", "empty file"),
    ("run_id,time,signature\nx,1,s\n", "missing column(s) seconds_per_step"),
    ("run_id,time,seconds_per_step\n", "missing column(s) signature"),
    ("run_id,time,signature,seconds_per_step\nx,yesterday,s,1\n", "no usable runs"),
    ("a\x00b", "binary data"),
])
def test_bad_csv_messages_name_the_path(text: str, msg: str) -> None:
    with pytest.raises((DataError, ParseError)) as ei:
        parse_runs_csv(text, "/data/runs.csv")
    assert str(ei.value).startswith("/data/runs.csv: ") and msg in str(ei.value)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_garbage_bytes_never_crash(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    try:
        load = parse_runs_csv("run_id,time,signature,seconds_per_step,nodes\n" + text, "g.csv")
    except MinutiaeError:
        return
    for r in load.records:
        assert r.value > 0 and r.log_cost == r.log_cost


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=len(CSV)))
def test_truncation_never_crashes(n: int) -> None:
    with contextlib.suppress(MinutiaeError):
        parse_runs_csv(CSV[:n], "t.csv")


def test_expand_nodes_and_time() -> None:
    assert expand_nodes("gpu[008-010,012] cpu1") == ("gpu008", "gpu009", "gpu010", "gpu012", "cpu1")
    with pytest.raises(ValueError):
        expand_nodes("gpu[9-1]")
    assert parse_time("2026-01-01T00:00:00") == 1767225600.0
    with pytest.raises(ValueError):
        parse_time("nan")


def test_store_round_trip_wal_and_prefix(tmp_path: Path) -> None:
    db = tmp_path / "controller.db"
    recs = [
        RunRecord("r1", 100.0, "sig", 1.25, nodes=("gpu002", "gpu001"),
                  attrs={"driver": frozenset({"570.158.01", "570.124.06"}), "nccl": frozenset()},
                  gpus=16, duration_s=3600.0),
        RunRecord("r2", 200.0, "sig", 900.0, Metric.TOKENS_PER_S),
    ]
    with RunStore(db) as store:
        assert store.put(recs) == 2
        record_run(store, RunRecord("r2", 200.0, "sig", 950.0, Metric.TOKENS_PER_S))  # replaces
    with RunStore(db) as store:
        back = store.load()
        assert back[0] == recs[0]             # node order, empty and multi-valued attrs survive
        assert back[1].value == 950.0 and back[1].metric is Metric.TOKENS_PER_S
        assert [r.run_id for r in store.load(since=150)] == ["r2"]
        assert store.count() == 2
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables and all(t.startswith("runs_") for t in tables)


def test_load_history_from_csv_and_db(tmp_path: Path) -> None:
    p = tmp_path / "runs.csv"
    p.write_text(CSV)
    h = load_history(p, now=2e9)
    assert len(h.runs) == 4 and h.origin == str(p)
    with pytest.raises(DataError, match="no runs with signature 'nope'"):
        load_history(p, signature="nope")
    with pytest.raises(DataError, match="widen --since"):
        load_history(p, since=2e9)
    with pytest.raises(InputError, match="no such file"):
        read_runs_file(tmp_path / "missing.csv")
    with pytest.raises(InputError, match="exactly one of --runs FILE, --db PATH or --prom URL"):
        load_history(None, None)
    db = tmp_path / "c.db"
    RunStore(db).put(h.runs)
    assert [r.run_id for r in load_history(db=db).runs] == [r.run_id for r in h.runs]


def test_parquet_reads_like_csv(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.table({"run_id": ["p1", "p2"], "time": [1.0e9, 1.1e9], "signature": ["s", "s"],
                  "seconds_per_step": [1.0, 1.1], "driver": ["570.158.01", None]})
    pq.write_table(t, tmp_path / "runs.parquet")
    load = read_runs_file(tmp_path / "runs.parquet")
    assert [r.run_id for r in load.records] == ["p1", "p2"]
    assert load.records[1].attrs["driver"] == frozenset()
    (tmp_path / "bad.parquet").write_bytes(b"PAR1garbage")
    with pytest.raises(ParseError, match="bad.parquet"):
        read_runs_file(tmp_path / "bad.parquet")


def test_run_from_timings_slowest_rank_median_after_warmup() -> None:
    from minutiae.history.from_timings import run_from_timings, step_seconds

    rows = [(s, r, 10.0 if s < 10 else 1.0 + 0.1 * r + (0.5 if s == 50 else 0.0)) for s in range(100)
            for r in range(4)]
    rows.append((60, 9, float("nan")))
    assert step_seconds(rows) == pytest.approx(1.3)        # slowest rank 3; warm-up and one slow step ignored
    run = run_from_timings("j1", "llama", 100.0, 3700.0, rows, nodes=["gpu001"],
                           versions={"driver": ["570.158.01"]}, gpus=8)
    assert run.value == pytest.approx(1.3) and run.gpu_hours() == 8.0 and run.attrs["driver"] == {"570.158.01"}
    with pytest.raises(DataError, match="no usable step timings"):
        step_seconds([(1, 0, 0.0), (2, 0, float("inf"))])

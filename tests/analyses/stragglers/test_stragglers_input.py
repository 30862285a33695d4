"""The stragglers command on files: DESIGN.md CSV/JSON contract, bad input, follow mode."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from minutiae.analyses.stragglers.analysis import Options, analyse
from minutiae.analyses.stragglers.prep import prepare
from minutiae.analyses.stragglers.stream import StragglerStream
from minutiae.cli.main import main
from minutiae.testing.synth.stragglers import Fault, FaultKind, SynthJob, SynthSpec

FAULT = Fault(FaultKind.GPU, 21, 0.20, 60)


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return SynthJob(SynthSpec(ranks=64, steps=150, faults=(FAULT,), seed=5)).table()


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["stragglers", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_csv_contract_json_shape(tmp_path: Path, table: pl.DataFrame,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.csv"
    table.with_columns(pl.lit("x").alias("extra")).write_csv(path)
    rc, out, _ = _cli(capsys, str(path), "--json")
    doc = json.loads(out)
    assert rc == 1
    (s,) = doc["suspects"]
    assert (s["rank"], s["node"], s["gpu"]) == (21, "gpu002", 5)
    assert 0.17 < s["slowdown"] < 0.23 and s["slowdown_ci"][0] <= s["slowdown"]
    assert 60 <= s["since_step"] <= 61 and s["detected_step"] <= 62
    assert s["component"] == "gpu:gpu002/5" and s["scope"] == "gpu"
    assert doc["ranks"] == 64 and doc["stopped"] == [] and doc["warnings"] == []


def test_minimal_columns_and_table_output(tmp_path: Path, table: pl.DataFrame,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    path = tmp_path / "min.csv"
    table.select("step", "rank", "seconds").write_csv(path)
    rc, out, err = _cli(capsys, str(path))
    assert rc == 1 and "rank:21" in out and "+20" in out
    assert "8 ranks per node assumed" in err


def test_bad_rows_are_reported_and_skipped(table: pl.DataFrame) -> None:
    df = table.select(pl.col("step", "rank", "seconds").cast(pl.String))
    bad = pl.DataFrame({"step": ["3", "4", "5", "6", "x"], "rank": ["1", "2", "3", "4", "5"],
                        "seconds": ["nan", "-1", "abc", "1e9", "1.0"]})
    extra = df.head(7)  # duplicates of existing (step, rank)
    mixed = pl.concat([df.select("step", "rank", "seconds"), bad, extra.select("step", "rank", "seconds")])
    m = prepare(mixed.sample(fraction=1.0, shuffle=True, seed=1), "mixed.csv")
    w = " | ".join(m.warnings)
    assert "1 of" in w and "valid non-negative step/rank" in w
    assert "3 of" in w and "missing, non-numeric, zero or negative" in w
    assert "1 rows with implausible durations" in w
    assert "7 duplicate (step, rank, section) rows" in w
    report = analyse(m)
    assert [s.rank for s in report.suspects] == [21]


def test_rank_in_milliseconds_is_converted_not_blamed(table: pl.DataFrame) -> None:
    df = table.with_columns(pl.when(pl.col("rank") == 9).then(pl.col("seconds") * 1000)
                            .otherwise(pl.col("seconds")).alias("seconds"))
    m = prepare(df, "units.csv")
    assert any("rank(s) 9 report ~1000x" in w for w in m.warnings)
    assert [s.rank for s in analyse(m).suspects] == [21]


def test_missing_and_stopped_ranks(table: pl.DataFrame) -> None:
    df = table.filter((pl.col("rank") != 40) & ~((pl.col("rank") == 33) & (pl.col("step") > 100)))
    m = prepare(df, "gaps.csv")
    assert any("rank(s) 40 never reported" in w for w in m.warnings)
    report = analyse(m)
    assert [(s.rank, s.last_step) for s in report.stopped] == [(33, 100)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"step,rank\n1,2\n", 'at least step,rank,seconds; first line: "step,rank"'),
        (b"\x00\x01\x02garbage\xff\xfe", "not a timing CSV"),
        (b"step,rank,seconds\n1,0,abc\n", "no usable timing rows"),
        (b"PAR1 not really parquet", "unreadable Parquet"),
        # one rank cannot be compared with anything (2-rank jobs get the self-baseline)
        (b"step,rank,seconds\n1,0,1.0\n2,0,1.0\n3,0,1\n4,0,1\n",
         "at least 2 are needed to compare ranks"),
    ],
)
def test_bad_files_give_a_message_naming_the_path(tmp_path: Path, content: bytes, message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    rc, _, err = _cli(capsys, str(path), "--json")
    assert rc == 3
    assert str(path) in err and message in err and "Traceback" not in err


def test_unreadable_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _cli(capsys, str(tmp_path / "nope.csv"))
    assert rc == 3 and "nope.csv: cannot read" in err


def test_stream_equals_batch(table: pl.DataFrame) -> None:
    batch = analyse(prepare(table, "t"), Options())
    stream = StragglerStream(Options(), "t")
    found = []
    for step in range(150):  # rows of one step at a time, ranks shuffled
        found += stream.feed(table.filter(pl.col("step") == step).sample(fraction=1.0, shuffle=True, seed=step))
    found += stream.feed(pl.DataFrame(), final=True)
    report = stream.report()
    assert report is not None
    key = [(s.component, s.since_step, s.detected_step) for s in batch.suspects]
    assert [(s.component, s.since_step, s.detected_step) for s in found] == key
    assert [(s.component, s.since_step, s.detected_step) for s in report.suspects] == key
    assert report.suspects[0].slowdown == pytest.approx(batch.suspects[0].slowdown, rel=1e-6)


def test_follow_growing_file(tmp_path: Path, table: pl.DataFrame,
                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "live.csv"
    text = table.select("step", "rank", "seconds", "node", "gpu").write_csv()
    cut = len(text) - 1000
    path.write_text(text[:cut])  # ends mid-line: the partial line must wait
    rc, out, _ = _cli(capsys, str(path), "--follow", "--json", "--idle-exit", "0.3", "--poll", "0.05")
    events = [json.loads(line) for line in out.splitlines()]
    assert events[0]["event"] == "suspect" and events[0]["rank"] == 21
    assert events[-1]["event"] == "report" and rc == 1
    assert np.isfinite(events[-1]["noise"])

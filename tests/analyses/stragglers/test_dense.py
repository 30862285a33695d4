"""The common layout read straight into the matrix (``dense``, issue 13 item 7): the same
matrix and warnings as the long table through ``prepare``, to the bit, for every file it
accepts; every other file left to the general path (None), which repairs and reports."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minutiae.analyses.stragglers import ingest
from minutiae.analyses.stragglers.ingest import read_matrix
from minutiae.analyses.stragglers.prep import TimingMatrix, prepare
from minutiae.analyses.stragglers.read import read_timings
from minutiae.cli.main import main


def _grid(ranks: int = 24, steps: int = 40, seed: int = 0, f32: bool = False) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    x = np.exp(rng.normal(0.0, 0.02, (steps, ranks)))
    return pl.DataFrame({
        "step": np.repeat(np.arange(steps, dtype=np.int32), ranks),
        "rank": np.tile(np.arange(ranks, dtype=np.int32), steps),
        "seconds": x.ravel().astype(np.float32) if f32 else x.ravel()})


def _write(df: pl.DataFrame, path: Path, row_group: int | None = None) -> Path:
    if path.suffix == ".csv":
        df.write_csv(path)
    elif row_group:
        pq.write_table(df.to_arrow(), path, row_group_size=row_group)
    else:
        df.write_parquet(path)
    return path


def _same(a: TimingMatrix, b: TimingMatrix) -> None:
    for name in ("steps", "ranks", "total", "compute", "gpu"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), name
    assert a.comm is None and b.comm is None
    assert (a.stage is None and b.stage is None) or (
        a.stage is not None and b.stage is not None and a.stage.dtype == b.stage.dtype
        and np.array_equal(a.stage, b.stage))
    assert (a.node, a.leaf, a.basis, a.warnings) == (b.node, b.leaf, b.basis, b.warnings)


def _check(path: Path) -> TimingMatrix | None:
    """``read_matrix`` of ``path``; when it accepts the file, the general path's matrix of
    the same file must be the same."""
    got = read_matrix([path])
    if got is not None:
        df, _ = read_timings([path])
        _same(got, prepare(df, str(path)))
    return got


VARIANTS: dict[str, Callable[[pl.DataFrame], pl.DataFrame]] = {
    "plain": lambda d: d,
    "float32": lambda d: d.with_columns(pl.col("seconds").cast(pl.Float32)),
    "int64 ids": lambda d: d.with_columns(pl.col("step", "rank").cast(pl.Int64)),
    "rank ids with gaps": lambda d: d.with_columns(pl.col("rank") * 3 + 5),
    "a rank in ms": lambda d: d.with_columns(
        pl.when(pl.col("rank") == 7).then(pl.col("seconds") * 1000).otherwise(pl.col("seconds"))),
    "all in ms": lambda d: d.with_columns(pl.col("seconds") * 4000),
    "steps logged 1 in 10": lambda d: d.with_columns(pl.col("step") * 10 + 500),
    "one row": lambda d: d.head(1),
    "one step": lambda d: d.filter(pl.col("step") == 3),
    "node and gpu": lambda d: d.with_columns(
        pl.format("gpu{}", (pl.col("rank") // 8).cast(pl.String).str.zfill(3)).alias("node"),
        (pl.col("rank") % 8).cast(pl.Int8).alias("gpu")),
    "stage numbers": lambda d: d.with_columns((pl.col("rank") // 6).cast(pl.Int16).alias("stage")),
    "stage text": lambda d: d.with_columns(
        pl.format("s{}", (23 - pl.col("rank")) // 2).alias("stage")),
    "leaf": lambda d: d.with_columns(pl.format("leaf{}", pl.col("rank") // 12).alias("leaf"),
                                     pl.format("n{}", pl.col("rank") // 4).alias("node")),
    "categorical node": lambda d: d.with_columns(
        pl.format("n{}", pl.col("rank") // 4).cast(pl.Categorical).alias("node")),
    "empty sections": lambda d: d.with_columns(pl.lit("").alias("section")),
    "null sections": lambda d: d.with_columns(pl.lit(None, pl.String).alias("section")),
    "section 'total'": lambda d: d.with_columns(pl.lit(" Total").alias("section")),
    "simulator columns": lambda d: d.with_columns(
        pl.format("n{}", pl.col("rank") // 8).alias("node"), (pl.col("rank") % 8).alias("gpu"),
        (pl.col("rank") // 12).alias("stage"), (pl.col("step") * 1.5).alias("time"),
        pl.lit("").alias("section")),
    "extra columns": lambda d: d.with_columns(pl.lit("x").alias("host_note"),
                                              (pl.col("seconds") * 1e3).alias("ms")),
}


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_common_layout_gives_the_matrix_prepare_gives(tmp_path: Path, variant: str,
                                                      suffix: str) -> None:
    path = _write(VARIANTS[variant](_grid()), tmp_path / f"t{suffix}")
    assert _check(path) is not None  # taken by the fast path, and equal


@pytest.mark.parametrize("rows", [1, 7, 24, 37, 100])
def test_blocks_and_row_groups_cut_anywhere(tmp_path: Path, rows: int,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "BLOCK_ROWS", rows)
    df = VARIANTS["a rank in ms"](_grid(f32=True))
    assert _check(_write(df, tmp_path / "t.parquet", row_group=rows + 3)) is not None
    assert _check(_write(df, tmp_path / "t.csv")) is not None


def _drop_cell(d: pl.DataFrame) -> pl.DataFrame:
    return d.filter(~((pl.col("step") == 30) & (pl.col("rank") == 3)))


def _cell(value: float | None) -> Callable[[pl.DataFrame], pl.DataFrame]:
    return lambda d: d.with_columns(pl.when((pl.col("step") == 30) & (pl.col("rank") == 3))
                                    .then(value).otherwise(pl.col("seconds")).alias("seconds"))


GENERAL: dict[str, Callable[[pl.DataFrame], pl.DataFrame]] = {
    "rows shuffled": lambda d: d.sample(fraction=1.0, shuffle=True, seed=1),
    "rank-major order": lambda d: d.sort("rank", "step"),
    "ranks not ascending": lambda d: d.with_columns((23 - pl.col("rank")).alias("rank")),
    "a missing cell": _drop_cell,
    "a rank that stops": lambda d: d.filter((pl.col("rank") != 5) | (pl.col("step") < 30)),
    "a duplicate row": lambda d: pl.concat([d, d.slice(100, 1)]),
    "a step reset": lambda d: pl.concat([d, d.filter(pl.col("step") < 10)]),
    "null duration": _cell(None),
    "zero duration": _cell(0.0),
    "negative duration": _cell(-1.0),
    "NaN duration": _cell(float("nan")),
    "implausible duration": _cell(2e6),
    "sub-nanosecond duration": _cell(1e-10),
    "negative step": lambda d: d.with_columns(pl.col("step") - 3),
    "rank id past the limit": lambda d: d.with_columns(
        pl.when(pl.col("rank") == 23).then(1 << 30).otherwise(pl.col("rank")).alias("rank")),
    "capitalised name": lambda d: d.rename({"rank": "Rank"}),
    "a rank moves node": lambda d: d.with_columns(pl.format(
        "n{}", (pl.col("rank") + (pl.col("step") >= 20)) // 8).alias("node")),
    "a null node": lambda d: d.with_columns(pl.when(pl.col("step") == 30).then(None).otherwise(
        pl.format("n{}", pl.col("rank") // 8)).alias("node")),
    "a gpu that changes": lambda d: d.with_columns((pl.col("rank") % 8 + (pl.col("step") == 9))
                                                   .alias("gpu")),
    "section names": lambda d: d.with_columns(
        pl.when(pl.col("step") == 7).then(pl.lit("total")).otherwise(pl.lit("")).alias("section")),
    "compute sections": lambda d: d.with_columns(pl.lit("forward").alias("section")),
    "role column": lambda d: d.with_columns(pl.lit("expert").alias("role")),
    "float gpu": lambda d: d.with_columns((pl.col("rank") % 8).cast(pl.Float64).alias("gpu")),
    "float step": lambda d: d.with_columns(pl.col("step").cast(pl.Float64)),
    "string step": lambda d: d.with_columns(pl.col("step").cast(pl.String)),
}


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("variant", sorted(GENERAL))
def test_anything_else_is_left_to_the_general_path(tmp_path: Path, variant: str,
                                                   suffix: str) -> None:
    if variant == "string step" and suffix == ".csv":
        pytest.skip("the same CSV text as integer steps")
    assert _check(_write(GENERAL[variant](_grid()), tmp_path / f"t{suffix}")) is None


@pytest.mark.parametrize("content", [b"", b"\x00\x01garbage", b"PAR1 not really parquet",
                                     b"step,rank\n1,2\n", b"step,rank,seconds\n1,0,abc\n",
                                     b"step,rank,seconds\n1,0,1.0\n1,1,1.0\n",
                                     b"step,rank,seconds\n3000000000,0,1.0\n3000000000,1,1\n"])
def test_bad_or_odd_bytes_are_left_to_the_general_path(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.csv"
    path.write_bytes(content)
    assert read_matrix([path]) is None or content.startswith(b"step,rank,seconds\n1,0,1.0\n1")
    assert read_matrix([tmp_path]) is None and read_matrix([tmp_path / "nope.csv"]) is None
    assert read_matrix([path, path]) is None


def test_a_footer_claiming_too_many_rows_is_not_allocated(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(_grid(), tmp_path / "t.parquet")
    monkeypatch.setattr(ingest, "MAX_ROWS", 959)  # the file has 960
    assert read_matrix([path]) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranks=st.integers(1, 9), steps=st.integers(1, 12), cut=st.integers(1, 40),
       where=st.integers(0, 10_000), how=st.sampled_from(["none", "swap", "drop", "dup", "value",
                                                           "step", "rank"]))
def test_random_tables_either_match_or_go_general(tmp_path: Path, ranks: int, steps: int,
                                                  cut: int, where: int, how: str) -> None:
    d = _grid(ranks, steps, seed=where, f32=True)
    i = where % d.height
    cols = {c: d[c].to_list() for c in d.columns}
    if how == "swap" and d.height > 1:
        j = (i + 1) % d.height
        for c in cols.values():
            c[i], c[j] = c[j], c[i]
    elif how in ("drop", "dup"):
        for c in cols.values():
            c.insert(i, c[i]) if how == "dup" else c.pop(i)
    elif how in ("value", "step", "rank"):
        key = "seconds" if how == "value" else how
        cols[key][i] = {"value": 1e-12, "step": cols["step"][i] + 1, "rank": -1}[how]
    table = pa.table({"step": pa.array(cols["step"], pa.int32()),
                      "rank": pa.array(cols["rank"], pa.int32()),
                      "seconds": pa.array(cols["seconds"], pa.float32())})
    path = tmp_path / "h.parquet"
    pq.write_table(table, path, row_group_size=cut)
    got = read_matrix([path])
    if got is not None:
        _same(got, prepare(pl.read_parquet(path), str(path)))
    if how == "none" and ranks * steps > 0:
        assert got is not None


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_cli_report_is_the_general_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    d = _grid(64, 150, f32=True).with_columns(
        pl.when((pl.col("rank") == 21) & (pl.col("step") >= 60)).then(pl.col("seconds") * 1.2)
        .otherwise(pl.col("seconds")), pl.format("n{}", pl.col("rank") // 8).alias("node"),
        (pl.col("rank") % 8).alias("gpu"))
    path = _write(d, tmp_path / f"job{suffix}")
    fleet = tmp_path / "fleet.csv"
    fleet.write_text("node,rack,leaf\n" + "".join(f"n{i},r0,leaf{i // 4}\n" for i in range(8)))
    args = ["stragglers", str(path), "--json", "--fleet", str(fleet)]
    assert main(args) == 1
    fast = capsys.readouterr().out
    monkeypatch.setattr(ingest, "read_matrix", lambda paths: None)
    assert main(args) == 1
    assert capsys.readouterr().out == fast
    (s,) = json.loads(fast)["suspects"]
    assert (s["rank"], s["node"], s["gpu"], s["leaf"]) == (21, "n2", 5, "leaf0")

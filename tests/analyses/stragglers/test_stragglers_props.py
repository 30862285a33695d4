"""Property tests: the timing readers never crash on garbage or truncated input."""

from __future__ import annotations

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minutiae.analyses.stragglers.analysis import analyse
from minutiae.analyses.stragglers.parse import parse_timings
from minutiae.analyses.stragglers.parse_megatron import parse_megatron
from minutiae.analyses.stragglers.prep import prepare
from minutiae.errors import InputError
from minutiae.testing.synth.stragglers import SynthJob, SynthSpec

CSV = SynthJob(SynthSpec(ranks=16, steps=30, seed=1)).table().write_csv().encode()
PARQUET_DF = SynthJob(SynthSpec(ranks=16, steps=30, seed=1)).table()
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _read(data: bytes) -> None:
    try:
        df = parse_timings(data, "x.csv")
        m = prepare(df, "x.csv")
        if m.ranks.size >= 3 and m.steps.size >= 3:
            analyse(m, where="x.csv")
    except InputError as exc:
        assert "x.csv" in str(exc)


@SETTINGS
@given(st.binary(max_size=2000))
def test_garbage_bytes(data: bytes) -> None:
    _read(data)


@SETTINGS
@given(st.integers(min_value=0, max_value=len(CSV)))
def test_truncated_csv(cut: int) -> None:
    _read(CSV[:cut])


@SETTINGS
@given(st.integers(min_value=0, max_value=len(CSV) - 1), st.binary(min_size=1, max_size=20))
def test_corrupted_csv(at: int, junk: bytes) -> None:
    _read(CSV[:at] + junk + CSV[at + len(junk):])


@SETTINGS
@given(st.lists(st.tuples(st.integers(-3, 40), st.integers(-2, 20),
                          st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4))),
                max_size=300))
def test_arbitrary_rows(rows: list[tuple[int, int, object]]) -> None:
    df = pl.DataFrame({"step": [r[0] for r in rows], "rank": [r[1] for r in rows],
                       "seconds": [str(r[2]) for r in rows]}, schema={"step": pl.Int64, "rank": pl.Int64, "seconds": pl.String})
    try:
        m = prepare(df, "rows.csv")
        if m.ranks.size >= 3 and m.steps.size >= 3:
            analyse(m, where="rows.csv")
    except InputError as exc:
        assert "rows.csv" in str(exc)


@SETTINGS
@given(st.text(max_size=3000))
def test_megatron_text(text: str) -> None:
    log = parse_megatron(text)
    assert log.ranks.columns == ["step", "rank", "seconds", "section"]


def test_parquet_roundtrip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t.parquet"
    PARQUET_DF.write_parquet(path)
    data = path.read_bytes()
    m = prepare(parse_timings(data, str(path)), str(path))
    assert (m.ranks.size, m.steps.size) == (16, 30)
    for cut in (8, len(data) // 2, len(data) - 4):
        try:
            parse_timings(data[:cut], str(path))
        except InputError as exc:
            assert str(path) in str(exc)


@SETTINGS
@given(st.lists(st.tuples(st.integers(-2, 60), st.integers(-1, 20),
                          st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32),
                                    st.just(1.0))), min_size=1, max_size=400),
       st.integers(1, 5))
def test_stream_survives_anything(rows: list[tuple[int, int, float]], chunks: int) -> None:
    from minutiae.analyses.stragglers.analysis import Options
    from minutiae.analyses.stragglers.stream import StragglerStream

    df = pl.DataFrame(rows, schema={"step": pl.Int64, "rank": pl.Int64, "seconds": pl.Float64},
                      orient="row")
    stream = StragglerStream(Options(warmup=3), "live.csv")
    try:
        for part in range(chunks):
            stream.feed(df.filter(pl.col("step") % chunks == part))
        stream.feed(pl.DataFrame(), final=True)
        stream.report()
    except InputError as exc:
        assert "live.csv" in str(exc)

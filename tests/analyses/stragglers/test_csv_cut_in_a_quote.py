"""A timing CSV cut inside a quoted field (a copy interrupted, a file still being written) made
polars 1.x panic (a Rust ``PanicException``, not an ``Exception``): found by the hypothesis
suite under seed 196656890022343507295139935653730274759 in a clean-clone run. The rows before
the cut are read; the cut line, no value, is not."""

from __future__ import annotations

import pytest

from minutiae.analyses.stragglers.parse import parse_csv, parse_timings
from minutiae.errors import MinutiaeError


@pytest.mark.parametrize("tail", [b'1,1,"', b'"', b'1,1,"0.9'])
def test_the_rows_before_a_cut_quote_are_read(tail: bytes) -> None:
    df = parse_csv(b"step,rank,seconds\n0,0,1.0\n0,1,1.1\n" + tail, "cut.csv")
    assert df.select("step", "rank", "seconds").rows() == [(0, 0, 1.0), (0, 1, 1.1)]


def test_a_file_that_is_only_a_cut_quote_is_a_clear_refusal() -> None:
    with pytest.raises(MinutiaeError):
        parse_timings(b'"', "cut.csv")

"""impact arithmetic on a hand-computable history, and the --where/--speedup grammars."""

from __future__ import annotations

import math

import pytest

from minutiae.analyses.regress.impact import impact
from minutiae.analyses.regress.where import (
    compare_versions,
    parse_duration,
    parse_fraction,
    parse_where,
)
from minutiae.errors import ConfigError, DataError
from minutiae.history.record import RunRecord

W = 7 * 86400.0
H = 3600.0


def _run(rid: str, t: float, nccl: set[str], gpus: int, hours: float) -> RunRecord:
    return RunRecord(rid, t, "s", 1.0, attrs={"nccl": frozenset(nccl)}, gpus=gpus, duration_s=hours * H)


HIST = [
    _run("r1", 0.0, {"2.21.5"}, 8, 10),          # 80 GPU-h, week 0, matches
    _run("r2", 1.0 * W, {"2.23.4"}, 32, 5),      # 160 GPU-h, week 1, matches
    _run("r3", 1.5 * W, {"2.20.3"}, 8, 1),       # 8 GPU-h, does not match
    _run("r4", 2 * W - H, set(), 8, 1),          # 8 GPU-h, nccl unknown; ends exactly at 2 weeks
]


def test_impact_by_hand() -> None:
    res = impact(HIST, 0.008, parse_where("NCCL>=2.21", ["nccl"]))
    assert (res.runs_matched, res.runs_unknown, res.runs_total) == (2, 1, 4)
    assert res.weeks == 2.0 and res.gpu_hours_matched == 240.0
    assert math.isclose(res.gpu_days_per_week, 0.008 * 240 / 2 / 24)     # 0.04
    assert math.isclose(res.share, 240 / 256)
    assert math.isclose(res.low or 0, 0.008 * 80 / 24) and math.isclose(res.high or 0, 0.008 * 160 / 24)
    slow = impact(HIST, -0.01, parse_where("nccl>=2.21", ["nccl"]))
    assert slow.gpu_days_per_week < 0


def test_mixed_version_run_matches_only_if_all_do() -> None:
    mixed = [_run("m", 0.0, {"2.21.5", "2.18.1"}, 8, 1), _run("n", W, {"2.22"}, 8, 1)]
    res = impact(mixed, 0.01, parse_where("nccl>=2.21", ["nccl"]))
    assert res.runs_matched == 1


def test_no_usage_is_a_clear_error() -> None:
    with pytest.raises(DataError, match="GPU count and duration"):
        impact([RunRecord("x", 0.0, "s", 1.0, attrs={"nccl": frozenset({"2.21"})})], 0.01,
               parse_where("nccl>=2.21", ["nccl"]))


@pytest.mark.parametrize("a,b,cmp", [
    ("2.21.5", "2.21", 1), ("2.21", "2.21.0", 0), ("570.158.01", "570.86.16", 1),
    ("2.21.0rc1", "2.21.0", -1), ("5.15.0-141-generic", "5.15.0-126-generic", 1), ("12.8", "12.10", -1),
])
def test_versions(a: str, b: str, cmp: int) -> None:
    assert compare_versions(a, b) == cmp and compare_versions(b, a) == -cmp


@pytest.mark.parametrize("text,msg", [
    ("", "empty"), ("NCCL=>2.21", "cannot read"), ("gpu_kind>=3", "unknown attribute 'gpu_kind'"),
    ("nccl>=2.21 and", "cannot read"), ("node>=gpu001", "node takes"),
])
def test_where_errors(text: str, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        w = parse_where(text, ["nccl", "driver"])
        w.matches(RunRecord("x", 0.0, "s", 1.0, nodes=("gpu001",)))


def test_where_and_clauses_and_fraction_and_duration() -> None:
    w = parse_where("nccl>=2.21 and driver==570.158.01, node!=gpu009", ["nccl", "driver"])
    assert len(w.clauses) == 3
    r = RunRecord("x", 0.0, "s", 1.0, nodes=("gpu001",),
                  attrs={"nccl": frozenset({"2.23.4"}), "driver": frozenset({"570.158.01"})})
    assert w.matches(r) is True
    assert parse_fraction("0.8%") == 0.008 and parse_fraction("-0.01") == -0.01
    for bad in ("0", "150%", "fast"):
        with pytest.raises(ConfigError, match="--speedup"):
            parse_fraction(bad)
    assert parse_duration("14d") == 14 * 86400 and parse_duration("36h") == 36 * 3600
    with pytest.raises(ConfigError, match="--since"):
        parse_duration("two weeks")

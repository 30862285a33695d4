"""Hypothesis: every run-history parser survives garbage and truncation with a clear error."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import MinutiaeError
from minutiae.history.read_prometheus import parse_query_range
from minutiae.history.rollouts import group_rollouts, parse_fleet_csv, parse_rollouts_csv
from minutiae.history.usage import join_usage, parse_jobs_csv

ROLLOUTS = ("time,node,attr,old,new\n1767312794,gpu010,driver,535.161.08,535.183.01\n"
            "1767315337,gpu032,driver,535.161.08,535.183.01\n1767400000,gpu010,nccl,2.19.3,2.20.5\n")
JOBS = ("job_id,start,end,nodes,signature,world_size,ranks_per_node,outcome\n"
        "100001,1767225600,1767274787,gpu[001-002],gpt,16,8,completed\n")


def test_rollouts_grouped_and_jobs_joined() -> None:
    changes, issues = parse_rollouts_csv(ROLLOUTS, "rollouts.csv")
    assert not issues
    drv, nccl = group_rollouts(changes)
    assert drv.name == "driver 535.161.08 → 535.183.01" and drv.nodes == {"gpu010", "gpu032"}
    assert (drv.start, drv.end) == (1767312794.0, 1767315337.0) and nccl.at == {"gpu010": 1767400000.0}
    jobs, _ = parse_jobs_csv(JOBS, "jobs.csv")
    assert jobs["100001"].gpus == 16 and jobs["100001"].duration_s == 49187.0
    from minutiae.history.record import RunRecord

    (r,), n = join_usage([RunRecord("100001", 1767225600.0, "gpt", 1.0)], jobs)
    assert n == 1 and r.nodes == ("gpu001", "gpu002") and r.gpu_hours() == 16 * 49187 / 3600


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=len(ROLLOUTS)))
def test_rollouts_fleet_jobs_garbage(data: bytes, cut: int) -> None:
    text = data.decode("utf-8", "replace")
    for parse, head in ((parse_rollouts_csv, "time,node,attr,old,new\n"), (parse_fleet_csv, "node,driver\n"),
                        (parse_jobs_csv, "job_id,start,end,nodes,world_size\n")):
        for body in (head + text, text, ROLLOUTS[:cut]):
            try:
                parse(body, "x.csv")  # type: ignore[operator]
            except MinutiaeError as exc:
                assert str(exc).startswith("x.csv: ")


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=20))
def test_prometheus_answers_garbage(doc: object) -> None:
    body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": doc}})
    for text in (body, json.dumps(doc), body[: len(body) // 2]):
        try:
            parse_query_range(200, text, "http://prom")
        except MinutiaeError as exc:
            assert str(exc).startswith("http://prom: ")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_runs_csv_any_text(text: str) -> None:
    from minutiae.history.parse import parse_runs_csv

    try:
        load = parse_runs_csv(text, "r.csv")
    except MinutiaeError as exc:
        assert str(exc).startswith("r.csv: ")
    else:
        assert all(r.value > 0 for r in load.records)

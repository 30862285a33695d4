"""Issue 18 item 3: a damaged history is never replayed as healthy. Every damaged file is a
line naming the file and line, and an UNKNOWN node-window (the node stops reporting: reconcile
sees it silent, neither healthy nor drained); a damaged fleet-wide file is refused (exit 3)
unless --allow-damaged. Datasets in the docs/dataset.md layout, kernel lines in the real
`dmesg --time-format iso -x` format (tests/backtest/test_backtest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_backtest import HOUR, T0, XID79, ib_rows, kline, write_dataset

from minutiae.backtest.history import EventKind, History, load_history
from minutiae.backtest.replay import replay
from minutiae.cli.main import main
from minutiae.controller.policy import load_policy
from minutiae.controller.state import Verb
from minutiae.errors import DataError
from minutiae.scoring.damage import Harm


def reports(h: History, node: str) -> list[float]:
    return [e.report.time for e in h.events if e.node == node and e.kind is EventKind.REPORT
            and e.report is not None]


def cut(path: Path, keep: int) -> None:
    """Truncate ``path`` ``keep`` bytes before its end (mid-row: no final newline)."""
    data = path.read_bytes()
    path.write_bytes(data[:-keep])


@pytest.fixture
def ds(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "ds", nodes=8, days=0.5, ib={
        "gpu005": ib_rows(T0 + 1800, "4: ACTIVE", ("mlx5_1",), full=False)
        + ib_rows(T0 + HOUR, "4: ACTIVE", ("mlx5_0",), full=False)},
        maintenance=[(T0 + 3 * HOUR, "gpu002"), (T0 + 4 * HOUR, "gpu003")])


def test_ib_csv_cut_mid_row_is_unknown_from_its_last_good_row_not_a_port_down(ds: Path) -> None:
    # "...,state,4: ACTIVE" cut to "...,state,4" (no newline): before, that value parsed as a
    # port state and could drain; now the row is dropped and the node is UNKNOWN from T0+1h
    cut(ds / "nodes/gpu005/ib.csv", len(": ACTIVE\n"))
    h = load_history(ds)
    [d] = h.damage
    assert (d.node, d.path, d.harm, d.line, d.since) == ("gpu005", "nodes/gpu005/ib.csv", Harm.TRUNCATED,
                                                         2 + 12 + 1, T0 + 1800)
    assert d.message().startswith("gpu005: nodes/gpu005/ib.csv truncated at line 15 (cut mid-row)")
    assert "UNKNOWN from 2026-05-28 20:56:40 to end" in d.message()
    # its last report holds only to the damage: then it is silent (stale), never healthy
    assert max(reports(h, "gpu005")) == d.since
    assert max(reports(h, "gpu004")) == h.end
    r = replay(h, load_policy())
    assert not [x for x in r.decisions if x.node == "gpu005" and x.action is Verb.DRAIN]


def test_a_missing_node_folder_or_log_never_reports(ds: Path) -> None:
    import shutil

    shutil.rmtree(ds / "nodes/gpu006")
    (ds / "nodes/gpu007/kern.log").unlink()
    h = load_history(ds)
    got = {(d.node, d.path, d.harm) for d in h.damage}
    assert got == {("gpu006", "nodes/gpu006/", Harm.MISSING), ("gpu007", "nodes/gpu007/kern.log", Harm.MISSING)}
    assert reports(h, "gpu006") == [] and reports(h, "gpu007") == []
    assert "gpu006" in h.nodes  # still in the fleet: counted silent by the budget


def test_a_kernel_log_cut_mid_line_is_unknown_from_its_last_complete_line(ds: Path) -> None:
    log = ds / "nodes/gpu004/kern.log"
    log.write_text(log.read_text() + kline(T0 + 2 * HOUR, "EXT4-fs (nvme0n1p2): mounted") + "\n"
                   + kline(T0 + 2 * HOUR + 5, XID79))
    cut(log, 40)  # the Xid 79 line loses its end (and its newline)
    h = load_history(ds)
    [d] = h.damage
    assert (d.node, d.harm, d.line, d.since) == ("gpu004", Harm.TRUNCATED, 3, T0 + 2 * HOUR)
    r = replay(h, load_policy())
    assert not [x for x in r.drains if x.node == "gpu004"]


@pytest.mark.parametrize("name, line", [("fleet.csv", 9), ("maintenance.csv", 3), ("jobs.csv", 2)])
def test_a_damaged_fleet_wide_file_is_refused_unless_allowed(ds: Path, name: str, line: int,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    if name == "jobs.csv":
        (ds / name).write_text("job_id,start,end,nodes,signature,world_size,ranks_per_node\n"
                               f"7,{T0:.0f},{T0 + HOUR:.0f},gpu001 gpu002,llm,16")
    else:
        cut(ds / name, 5)
    with pytest.raises(DataError) as err:
        load_history(ds)
    assert f"{ds / name}: line {line}: cut mid-row (truncated)" in str(err.value)
    assert main(["backtest", str(ds)]) == 3
    assert f"{name}: line {line}" in capsys.readouterr().err
    h = load_history(ds, allow_damaged=True)
    [d] = [d for d in h.damage if d.path == name]
    assert d.fatal
    if name == "fleet.csv":  # the node it lost is UNKNOWN, the others report
        assert d.scope == ("gpu008",) and reports(h, "gpu008") == [] and reports(h, "gpu001")
    else:  # what came after its last good row is not known: every node from then on
        assert d.scope is None
        assert all(max(reports(h, n), default=h.start) <= d.since for n in h.nodes)
    assert main(["backtest", str(ds), "--allow-damaged", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [x["path"] for x in doc["damage"]] == [name]
    assert main(["backtest", str(ds), "--allow-damaged"]) == 0
    assert "UNKNOWN from" in capsys.readouterr().out


def test_fleet_csv_cut_at_a_row_boundary_is_caught_by_the_node_count(ds: Path) -> None:
    p = ds / "fleet.csv"
    p.write_text("".join(p.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(DataError, match="fleet.csv: line 9: 7 of meta.json's 8 nodes"):
        load_history(ds)


def test_an_ib_csv_that_ends_hours_early_is_unknown_from_then(ds: Path) -> None:
    meta = json.loads((ds / "meta.json").read_text())
    meta["sampling"] = {"ib_interval_s": 300}
    (ds / "meta.json").write_text(json.dumps(meta))
    for n in range(1, 9):  # a whole history: every node has a row at the last sample
        p = ds / f"nodes/gpu{n:03d}/ib.csv"
        p.write_text(p.read_text() + "\n".join(ib_rows(meta["end"] - 300)) + "\n")
    p = ds / "nodes/gpu003/ib.csv"
    p.write_text("".join(p.read_text().splitlines(keepends=True)[:-12]))  # the last sample gone
    h = load_history(ds)
    [d] = h.damage
    assert (d.node, d.harm, d.since) == ("gpu003", Harm.ENDS_EARLY, T0)
    assert "last row 12.0 h before the end" in d.message()
    assert reports(h, "gpu003") == []  # its only good rows are at the start


def test_garbage_bytes_in_ib_csv(ds: Path) -> None:
    p = ds / "nodes/gpu001/ib.csv"
    lines = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(lines[:4]) + b"\xff\xfe\x13garbage,,\n" + b"".join(lines[4:]))
    [d] = load_history(ds).damage
    assert (d.node, d.harm, d.line) == ("gpu001", Harm.GARBLED, 5) and "not UTF-8" in d.detail


def _recorded(root: Path, minutes: int = 10) -> Path:
    """reports.jsonl in the controller's wire format (the JSON agents post to /v1/reports)."""
    root.mkdir()
    lines = [json.dumps({"node": f"gpu{n:03d}", "time": T0 + 60 * k, "status": "ok", "checks": []})
             for k in range(minutes) for n in (1, 2, 3)]
    (root / "reports.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_recorded_fleet_node_that_never_reports_is_unknown_and_counted_silent(tmp_path: Path) -> None:
    root = _recorded(tmp_path / "rec")
    (root / "fleet.csv").write_text("node,rack\ngpu001,r1\ngpu002,r1\ngpu003,r2\ngpu004,r2\n")
    h = load_history(root)
    [d] = h.damage
    assert (d.node, d.path, d.harm) == ("gpu004", "reports.jsonl", Harm.MISSING)
    assert "gpu004: reports.jsonl missing (listed in fleet.csv, never reports)" in d.message()
    # known from the start, so reconcile sees it silent (the budget counts it), not absent
    plan_nodes = {x.node for x in replay(h, load_policy(), fast=False).decisions}
    assert "gpu004" not in plan_nodes  # silent: neither drained nor resumed


def test_recorded_reports_cut_mid_line_is_refused_unless_allowed(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = _recorded(tmp_path / "rec")
    cut(root / "reports.jsonl", 20)
    assert main(["backtest", str(root)]) == 3
    assert "reports.jsonl: line 30: not JSON" in capsys.readouterr().err
    h = load_history(root, allow_damaged=True)
    [d] = h.damage
    assert (d.harm, d.line, d.since, d.scope) == (Harm.TRUNCATED, 30, T0 + 9 * 60, None)
    assert h.end == T0 + 9 * 60 + 60  # the replay ends with the last good report's heartbeat
    assert main(["backtest", str(root), "--allow-damaged"]) == 0
    assert "all nodes: reports.jsonl truncated at line 30" in capsys.readouterr().out

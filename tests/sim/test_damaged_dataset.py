"""The damage suite (issue 18 item 3): a small `minutiae sim` dataset, damaged one way at a
time (20 ways: cut mid-row or at a row boundary, garbled, deleted, ending early), replayed by `minutiae backtest` and scored by `minutiae eval`. Every case must end as
UNKNOWN with a message naming the file (the node-window it hits: no report after the damage,
no detection counted inside it) and must not add a single drain the undamaged run does not have.
A damaged fleet-wide file is refused (exit 3, file and line named) unless --allow-damaged.

Run with ``-s`` to see the table of cases."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from minutiae.backtest.history import EventKind, History, load_history
from minutiae.backtest.replay import replay
from minutiae.cli.main import main
from minutiae.controller.policy import load_policy
from minutiae.scoring.damage import Damage
from minutiae.sim.api import run_sim
from minutiae.sim.eval.evaluate import Evaluation, evaluate

#: 12 nodes x 4 GPUs x 2 days, fault and noise rates x60: the clean replay drains 4 times (all
#: right), 10 planned reboots, 22 jobs
SIM = {"nodes": 12, "gpus_per_node": 4, "days": 2.0, "seed": 5, "rate_scale": 60.0}


def _cut_mid_row(path: Path, frac: float = 0.5) -> None:
    """Keep the file up to a point inside the row at ``frac`` of its size (no final newline)."""
    data = path.read_bytes()
    k = int(len(data) * frac)
    nl = data.find(b"\n", k)
    end = nl - 3 if nl > 0 else len(data) - 3
    path.write_bytes(data[:max(data.find(b"\n") + 4, end)])


def _cut_at_row(path: Path, frac: float = 0.5) -> None:
    """Keep the file up to the end of the row at ``frac`` of its size (whole rows: what `head -n`
    or a copy stopped between two flushed lines leaves); only manifest.json's size tells."""
    data = path.read_bytes()
    nl = data.find(b"\n", int(len(data) * frac))
    path.write_bytes(data[:nl + 1] if nl > 0 else data)


def _busiest(root: Path, name: str) -> Path:
    return max((root / "nodes").glob(f"*/{name}"), key=lambda p: p.stat().st_size)


def _garbage(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    k = len(lines) // 2
    path.write_bytes(b"".join(lines[:k]) + b"\xff\xfe\x07\x1b[0m\xc3(,,\n" + b"".join(lines[k:]))


def _gap(path: Path) -> None:
    """The counters stop at a third of the history (cut at a row boundary: whole rows)."""
    lines = path.read_bytes().splitlines(keepends=True)
    t0 = float(lines[1].split(b",")[0])
    t1 = float(lines[-1].split(b",")[0])
    path.write_bytes(b"".join(x for i, x in enumerate(lines)
                              if i == 0 or float(x.split(b",")[0]) <= t0 + (t1 - t0) / 3))


@dataclass(frozen=True)
class Case:
    name: str
    damage: Callable[[Path], str]   # damages the copy, returns the damaged path (relative)
    fatal: bool = False
    backtest_reads: bool = True     # the backtest reads that file (eval reads them all)


def _rel(root: Path, p: Path) -> str:
    return str(p.relative_to(root))


def _do(fn: Callable[[Path], None], pick: Callable[[Path], Path]) -> Callable[[Path], str]:
    def run(root: Path) -> str:
        p = pick(root)
        fn(p)
        return _rel(root, p)
    return run


def _rm_tree(root: Path) -> str:
    p = _busiest(root, "kern.log").parent
    shutil.rmtree(p)
    return _rel(root, p) + "/"


def _rm_log(root: Path) -> str:
    p = _busiest(root, "kern.log")
    p.unlink()
    return _rel(root, p)


def _rm_ib(root: Path) -> str:
    p = _busiest(root, "ib.csv")
    p.unlink()
    return _rel(root, p)


def _timings(root: Path) -> Path:
    return max((root / "timings").glob("*.parquet"), key=lambda p: p.stat().st_size)


CASES = [
    Case("ib.csv cut mid-row", _do(_cut_mid_row, lambda r: _busiest(r, "ib.csv"))),
    Case("kern.log cut mid-line", _do(_cut_mid_row, lambda r: _busiest(r, "kern.log"))),
    Case("node folder deleted", _rm_tree),
    Case("node kern.log deleted", _rm_log),
    Case("garbage bytes in ib.csv", _do(_garbage, lambda r: _busiest(r, "ib.csv"))),
    Case("ib.csv ends early (time gap)", _do(_gap, lambda r: _busiest(r, "ib.csv"))),
    Case("fleet.csv cut mid-row", _do(_cut_mid_row, lambda r: r / "fleet.csv"), fatal=True),
    Case("maintenance.csv cut mid-row", _do(_cut_mid_row, lambda r: r / "maintenance.csv"), fatal=True),
    Case("jobs.csv cut mid-row", _do(_cut_mid_row, lambda r: r / "jobs.csv"), fatal=True),
    Case("boots.csv cut mid-row", _do(_cut_mid_row, lambda r: r / "boots.csv"), fatal=True,
         backtest_reads=False),
    Case("runs.csv cut mid-row", _do(_cut_mid_row, lambda r: r / "runs.csv"), fatal=True,
         backtest_reads=False),
    Case("telemetry.parquet cut", _do(_cut_mid_row, lambda r: r / "telemetry.parquet"), fatal=True,
         backtest_reads=False),
    Case("timings parquet cut", _do(_cut_mid_row, _timings), backtest_reads=False),
    # cut between two rows: whole rows, only the size the simulator wrote (manifest.json) tells
    Case("node ib.csv deleted", _rm_ib),
    Case("ib.csv cut at a row boundary", _do(_cut_at_row, lambda r: _busiest(r, "ib.csv"))),
    Case("kern.log cut at a line boundary", _do(_cut_at_row, lambda r: _busiest(r, "kern.log"))),
    Case("fleet.csv cut at a row boundary", _do(_cut_at_row, lambda r: r / "fleet.csv"), fatal=True),
    Case("maintenance.csv cut at a row boundary", _do(_cut_at_row, lambda r: r / "maintenance.csv"),
         fatal=True),
    Case("jobs.csv cut at a row boundary", _do(_cut_at_row, lambda r: r / "jobs.csv"), fatal=True),
    Case("boots.csv cut at a row boundary", _do(_cut_at_row, lambda r: r / "boots.csv"), fatal=True,
         backtest_reads=False),
]


def _bt_drains(h: History) -> set[tuple[str, float]]:
    return {(d.node, d.time) for d in replay(h, load_policy()).drains}


def _ev_drains(ev: Evaluation) -> set[tuple[str | None, float]]:
    return {(d["node"], d["time"]) for d in ev.drains()}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[tuple[str, float]],
                                                             set[tuple[str | None, float]]]:
    root = tmp_path_factory.mktemp("damage") / "clean"
    run_sim(root, **SIM)  # type: ignore[arg-type]
    h = load_history(root)
    ev = evaluate(root, jobs=1)
    assert not h.damage and not ev.dataset.damage  # an undamaged dataset is whole
    bt, evd = _bt_drains(h), _ev_drains(ev)
    assert len(bt) >= 3 and len(evd) >= 3  # the comparison means something
    return root, bt, evd


ROWS: list[tuple[str, ...]] = []


def _unknown_in_backtest(h: History, damage: list[Damage]) -> None:
    """Every node a damage affects stops reporting at the damage (UNKNOWN, never healthy)."""
    for d in damage:
        for n in h.nodes:
            if d.affects(n) and d.until is None:
                times = [e.time for e in h.events if e.node == n and e.kind is EventKind.REPORT]
                held = [e.report.time for e in h.events if e.node == n and e.kind is EventKind.REPORT
                        and e.report is not None]
                # nothing after its last good row; its last report holds only up to it
                assert all(t <= max(d.since, h.start) for t in [*times, *held]), (d.message(), n)
                if d.since <= h.start:
                    assert not times, (d.message(), n)  # damaged from the start: never reports


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_damage_is_unknown_with_a_message_and_never_a_wrong_drain(
        case: Case, clean: tuple[Path, set[tuple[str, float]], set[tuple[str | None, float]]],
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, bt_clean, ev_clean = clean
    root = tmp_path / "ds"
    shutil.copytree(base, root, symlinks=True)
    rel = case.damage(root)
    if case.fatal:  # refused, naming the file and the line
        for cmd in (["backtest", str(root)], ["eval", str(root), "--json"]):
            if cmd[0] == "backtest" and not case.backtest_reads:
                continue
            assert main(cmd) == 3, cmd
            err = capsys.readouterr().err
            assert rel in err and ("line " in err or "parquet" in rel), err
    h = load_history(root, allow_damaged=True)
    ev = evaluate(root, jobs=1, allow_damaged=True)
    bt_dmg = [d for d in h.damage if d.path == rel]
    ev_dmg = [d for d in ev.dataset.damage if d.path == rel]
    assert ev_dmg and all("UNKNOWN from" in d.message() for d in ev_dmg)
    if case.backtest_reads:
        assert bt_dmg and all("UNKNOWN from" in d.message() for d in bt_dmg)
        _unknown_in_backtest(h, bt_dmg)
    for r in ev.detectors:  # nothing counted inside an UNKNOWN node-window
        assert not [x for x in r.detections if ev.dataset.unknown(x.node, x.time)], r.name
    bt, evd = _bt_drains(h), _ev_drains(ev)
    new_bt, new_ev = sorted(bt - bt_clean), sorted(evd - ev_clean, key=str)
    ROWS.append((case.name, rel, (bt_dmg or ev_dmg)[0].message()[:110],
                 f"{len(bt)}/{len(bt_clean)}", str(len(new_bt)), f"{len(evd)}/{len(ev_clean)}",
                 str(len(new_ev))))
    assert not new_bt, f"backtest drains the clean run does not have: {new_bt}"
    assert not new_ev, f"eval drains the clean run does not have: {new_ev}"
    if case.fatal:
        assert main(["backtest", str(root), "--allow-damaged"] if case.backtest_reads
                    else ["eval", str(root), "--allow-damaged"]) == 0
        assert "UNKNOWN from" in capsys.readouterr().out


def test_print_the_table() -> None:
    """The table of cases (after the parametrized cases; `pytest -s` shows it)."""
    if not ROWS:
        pytest.skip("run with the cases")
    head = ("case", "file", "first damage line", "bt drains", "bt new", "eval drains", "eval new")
    widths = [max(len(r[i]) for r in [head, *ROWS]) for i in range(len(head))]
    print()
    for r in [head, *ROWS]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))

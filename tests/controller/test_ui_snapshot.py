"""The web UI's fleet snapshot at scale (issue 14: no request over 200 ms at 20,000 nodes): an
action remakes the row of the node it acted on and no other (before, every action woke a
rebuild of every node's row, 150-300 ms of CPU at 20,000 nodes that the next requests waited
behind), a refresh with nothing changed makes no row, and the kept rows and counts are what
``node_rows`` and ``status`` say from scratch."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from minutiae.controller import queries
from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.controller.views import count_rows
from minutiae.schedulers.base import NodeSchedState
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

TOKEN = "admin-token-0123456789abcdef"
N = 2000
XID = {"kind": "xid", "code": 79, "severity": "critical", "action": "reboot",
       "message": "GPU has fallen off the bus"}


def _report(i: int, bad: bool) -> dict[str, Any]:
    st = "critical" if bad else "ok"
    return {"node": f"gpu{i:04d}", "status": st, "domains": {"rack": f"r{i // 32:03d}"},
            "checks": [{"check": "gpu", "status": st, "findings": [XID] if bad else []}]}


def _fleet(tmp_path: Path, dry_run: bool = False) -> tuple[Controller, RecordingBackend]:
    be = RecordingBackend(name="slurm")
    for i in range(N + 3):   # three nodes the scheduler knows never report
        be.add_node(f"gpu{i:04d}")
    ctl = Controller(Store(tmp_path / "c.db"), be, replace(load_policy(), dry_run=dry_run),
                     FakeClock())
    for i in range(N):
        ctl.ingest(_report(i, i % 97 == 0))
    ctl.committer.commit()
    ctl.step()
    ctl.step()   # the drains seen drained
    return ctl, be


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes whose row was made (``queries._row`` calls), in order."""
    calls: list[str] = []
    real = queries._row

    def counted(ctl: Controller, n: str, *a: Any) -> dict[str, Any]:
        calls.append(n)
        return real(ctl, n, *a)

    monkeypatch.setattr(queries, "_row", counted)
    return calls


def _fresh(ctl: Controller) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "report_age_s"} for r in queries.node_rows(ctl)]


def _kept(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "report_age_s"} for r in rows]


def test_an_action_remakes_only_the_row_of_its_node(tmp_path: Path, made: list[str]) -> None:
    ctl, be = _fleet(tmp_path)
    c = TestClient(make_app(ctl, TOKEN))
    assert c.post("/ui/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303
    m = re.search(r'"X-CSRF-Token": "([0-9a-f]{32})"', c.get("/ui").text)
    assert m is not None
    h = {"X-CSRF-Token": m.group(1)}
    assert f"{N + 3} of {N + 3} node(s)" in c.get("/ui/fragments/map").text
    assert len(made) == N + 3                       # the first snapshot: every row, once
    made.clear()
    r = c.post("/ui/actions/drain/gpu0005", data={"reason": "fan noise"}, headers=h)
    assert r.status_code == 200, r.text
    assert be.nodes["gpu0005"].state is NodeSchedState.DRAINED
    assert set(made) == {"gpu0005"}                 # not a walk over the fleet
    # the page's next poll shows the drain at once (no wait for the background refresh)
    assert re.search(r'class="t h-healthy s-drained"[^>]*data-n="gpu0005"',
                     c.get("/ui/fragments/map").text)
    made.clear()
    assert c.post("/ui/actions/pause", data={"reason": "x"}, headers=h).status_code == 200
    assert made == [] and "paused" in c.get("/ui/fragments/status").text
    assert c.post("/ui/actions/undo/gpu0005", headers=h).status_code == 200
    assert set(made) == {"gpu0005"} and be.nodes["gpu0005"].state is NodeSchedState.AVAILABLE


def test_a_refresh_remakes_what_changed_and_agrees_with_node_rows(tmp_path: Path,
                                                                   made: list[str]) -> None:
    ctl, be = _fleet(tmp_path)
    cache = queries.RowCache()
    rows, counted = cache.refresh(ctl)
    assert cache.made == N + 3 and _kept(rows) == _fresh(ctl)
    again, _ = cache.refresh(ctl)
    assert cache.made == 0 and again is rows        # nothing changed: the same list
    ctl.ingest(_report(7, True))                    # a node turns unhealthy, then drained
    ctl.step()
    rows, counted = cache.refresh(ctl)
    assert cache.made == 1 and _kept(rows) == _fresh(ctl)
    be.admin_drain("gpu0011", "bios")               # the scheduler's word, read at a step
    ctl.clock.advance(31)                           # type: ignore[attr-defined]
    ctl.step()
    rows, counted = cache.refresh(ctl)
    assert "gpu0011" in made and _kept(rows) == _fresh(ctl)
    ctl.clock.advance(ctl.policy.stale_after_s)     # type: ignore[attr-defined]
    ctl.ingest(_report(3, False))                   # every other report goes stale
    rows, counted = cache.refresh(ctl)
    assert _kept(rows) == _fresh(ctl)
    assert counted == dict(count_rows(queries.node_rows(ctl)))
    st, want = queries.status(ctl, rows, counted), queries.status(ctl)
    for k in ("nodes", "health", "unavailable", "silent", "never_reported", "would_be_drained"):
        assert st[k] == want[k], k
    assert want["silent"] > N - 30 and want["never_reported"] == 3


def test_a_new_node_or_dry_run_overlay_is_in_the_kept_rows(tmp_path: Path) -> None:
    ctl, be = _fleet(tmp_path, dry_run=True)
    cache = queries.RowCache()
    cache.refresh(ctl)
    be.add_node("gpu2050")
    ctl.ingest(_report(N + 50, True))               # new to the fleet
    ctl.clock.advance(31)                           # type: ignore[attr-defined]
    ctl.step()                                      # dry-run: would drain it
    rows, counted = cache.refresh(ctl, ["gpu2050"])
    assert _kept(rows) == _fresh(ctl) and counted["would_be_drained"] >= 1
    assert any(r["node"] == "gpu2050" and r["would"] for r in rows)


def test_kept_tiles_render_the_same_map_and_a_changed_row_its_new_tile() -> None:
    from minutiae.controller.http.pages import Tiles, fleet_map

    rows: list[dict[str, Any]] = [
        {"node": f"n{i}", "health": "healthy", "sched": "available", "silent": False,
         "would": None, "domains": {"rack": f"r{i // 4}"}} for i in range(12)]
    tiles: Tiles = {}
    assert fleet_map(rows, tiles=tiles) == fleet_map(rows) and len(tiles) == 12
    assert fleet_map(rows, group="none", tiles=tiles) == fleet_map(rows, group="none")
    rows[5] = {**rows[5], "health": "unhealthy", "sched": "drained"}   # a new row, not edited
    again = fleet_map(rows, tiles=tiles)
    assert again == fleet_map(rows) and 'class="t h-unhealthy s-drained" data-n="n5"' in again

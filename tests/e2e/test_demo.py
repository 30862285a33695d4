"""``minutiae demo`` on a small fleet: the report exists, holds the plots, and its numbers are
those of ``minutiae eval --json``; ``eval``/``sim`` fail with clear messages on bad input."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from minutiae.cli.main import main


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.cells: dict[str, str] = {}
        self._cell: str | None = None
        self.script = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.tags[str(a["id"])] = tag
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if tag == "td" and a.get("id"):
            self._cell = str(a["id"])
        self._in_script = tag == "script" and a.get("id") == "eval-json"

    def handle_endtag(self, tag: str) -> None:
        self._cell = None
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._cell:
            self.cells[self._cell] = self.cells.get(self._cell, "") + data
        if self._in_script:
            self.script += data


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("demo")
    out, report = root / "data", root / "report"
    rc = main(["demo", "--nodes", "16", "--days", "1", "--out", str(out), "--report", str(report),
               "--rate-scale", "60", "--seed", "4", "--quiet"])
    assert rc == 0
    return out, report


def _strip_timing(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _strip_timing(v) for k, v in obj.items() if k != "seconds"}
    if isinstance(obj, list):
        return [_strip_timing(v) for v in obj]
    return obj


def test_report_has_plots_and_tables(demo: tuple[Path, Path]) -> None:
    _out, report = demo
    html = (report / "index.html").read_text()
    p = _Ids()
    p.feed(html)
    for sid in ("heatmap", "timeline", "stragglers"):
        assert p.tags.get(sid) == "svg", sid
    for tid in ("summary", "scorecard", "drains", "detectors"):
        assert p.tags.get(tid) == "table", tid
    import xml.etree.ElementTree as ET

    for sid in ("heatmap", "timeline", "stragglers"):
        m = re.search(rf'<svg id="{sid}".*?</svg>', html, re.S)
        assert m is not None
        root = ET.fromstring(m.group(0))           # well-formed SVG
        assert root.tag.endswith("svg") and len(root) > 2
        if sid == "heatmap":   # every node has a row of cells
            ns = "{http://www.w3.org/2000/svg}"
            rows = {r.findtext(f"{ns}title") for r in root.iter(f"{ns}rect")} - {None}
            assert rows == {f"gpu{i:03d}" for i in range(1, 17)}
    fault_bars = len(re.findall(r'<rect class="fault"', html))
    faults = json.loads(p.script)["dataset"]["faults"]
    assert 0 < fault_bars <= faults
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)   # self-contained


def test_report_numbers_match_eval_json(demo: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out, report = demo
    capsys.readouterr()
    assert main(["eval", str(out), "--json"]) == 0
    fresh = json.loads(capsys.readouterr().out)
    p = _Ids()
    p.feed((report / "index.html").read_text())
    embedded = json.loads(p.script)
    assert _strip_timing(embedded) == _strip_timing(fresh)
    o = fresh["overall"]
    assert p.cells["summary-2"] == str(o["alarms"])
    assert p.cells["summary-3"] == f"{o['false_alarms_per_1000_node_days']:.1f}"
    d = o["drains"]
    assert p.cells["summary-4"] == f"{d['right']} / {d['wrong']} / {d['missed']} / {d['repeat']}"
    g = o["gpu_hours_lost"]
    assert p.cells["summary-5"] == f"{g['without_minutiae']:.1f} / {g['with_minutiae']:.1f}"
    assert fresh["dataset"]["faults"] > 5 and o["classes"]
    # every drain in the table is explained or called wrong, and the counts agree
    verdicts = [x["verdict"] for x in fresh["drains"]]
    assert verdicts.count("wrong") == d["wrong"]


def test_eval_table_for_people(demo: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = demo
    capsys.readouterr()
    assert main(["eval", str(out)]) == 0
    text = capsys.readouterr().out
    assert "scorecard" in text and "false alarms per 1,000 node-days" in text
    from minutiae.sim.dataset import load_dataset

    classes = {t.cls for t in load_dataset(out).truth if t.harmful and t.node}
    assert classes and all(c in text for c in classes)


def test_eval_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(tmp_path / "nope")]) == 3
    err = capsys.readouterr().err
    assert str(tmp_path / "nope") in err and "Traceback" not in err


def test_eval_truncated_truth(demo: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    out, _ = demo
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    text = (broken / "truth.jsonl").read_text()
    (broken / "truth.jsonl").write_text(text[: len(text) // 2])
    assert main(["eval", str(broken), "--json"]) == 3
    err = capsys.readouterr().err
    assert "truth.jsonl: line" in err and "Traceback" not in err


def test_sim_cli_writes_a_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--nodes", "3", "--days", "0.2", "--out", str(tmp_path / "d"), "--quiet"]) == 0
    assert "3 nodes x 8 GPUs" in capsys.readouterr().out
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert meta["nodes"] == 3 and meta["seed"] == 1
    assert main(["sim", "--nodes", "3", "--out", str(tmp_path / "d"), "--rate", "x"]) == 3

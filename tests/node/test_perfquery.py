"""The perfquery source (issue 16 item 4): ``perfquery -x`` / ``-e -x`` captures from public
threads (tests/data/infiniband_tools/README.md) → the sysfs counter names the ``ib.*`` rules read;
one module folder + one registry line (the registry test below shows it is wired)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minutiae.cli.main import main
from minutiae.node.sources.perfquery.parse import parse_perfquery
from minutiae.node.sources.registry import REGISTRY

DATA = Path(__file__).resolve().parents[1] / "data" / "infiniband_tools"


def test_real_captures_parse_to_sysfs_counter_names() -> None:
    s = parse_perfquery((DATA / "perfquery-e-x-netdata.txt").read_text())
    assert s.components("ib:") == ["ib:lid21/1"]
    assert s.value("ib:lid21/1", "port_rcv_data") == 2341975277576
    assert s.value("ib:lid21/1", "symbol_error") == 0 and s.value("ib:lid21/1", "link_downed") == 0
    s = parse_perfquery((DATA / "perfquery-x-rhel75.txt").read_text())
    assert s.value("ib:lid10/1", "port_xmit_discards") == 0
    assert s.value("ib:lid10/1", "VL15_dropped") == 0


def test_registered_as_one_line() -> None:
    assert [s.name for s in REGISTRY].count("perfquery") == 1


def _check(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    rc = main(["check", "--json", "--no-nvml", "--checks", "ib", "--node", "gpu001", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_counters_judged_and_rates_across_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cap = tmp_path / "pq.txt"
    text = (DATA / "perfquery-x-rhel75.txt").read_text()
    cap.write_text(text)
    state = tmp_path / "state.json"
    rc, doc = _check(["--perfquery", str(cap), "--state-file", str(state)], capsys)
    assert rc == 0, doc
    # the link went down twice and symbol errors climbed since the last run (values ours)
    cap.write_text(text.replace("LinkDownedCounter:...............0", "LinkDownedCounter:...............2")
                   .replace("SymbolErrorCounter:..............0", "SymbolErrorCounter:..............12000"))
    rc, doc = _check(["--perfquery", str(cap), "--state-file", str(state)], capsys)
    rules = {f["rule"] for c in doc["checks"] for f in c["findings"]}  # type: ignore[index,union-attr]
    assert {"ib.link-downed-increase", "ib.symbol-errors-total"} <= rules, doc
    assert rc == 1


def test_not_perfquery_is_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.txt"
    bad.write_text("hello\n")
    rc, doc = _check(["--perfquery", str(bad)], capsys)
    (ib,) = [c for c in doc["checks"] if c["check"] == "ib"]  # type: ignore[union-attr]
    assert rc == 3 and ib["status"] == "unknown" and "perfquery" in ib["reason"]
    rc, doc = _check(["--perfquery", str(tmp_path / "missing.txt")], capsys)
    assert rc == 3

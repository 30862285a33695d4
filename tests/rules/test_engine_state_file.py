"""The engine's state file: atomic round trip; missing, corrupt, huge or unreadable files give a
fresh state with a warning naming the path, never a crash."""

from __future__ import annotations

import contextlib
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import ConfigError, DataError, InputError
from minutiae.model import Observation
from minutiae.node import state_file
from minutiae.node.state_file import load_engine_state, save_engine_state
from minutiae.rules.engine.engine import Engine
from minutiae.rules.engine.rules import build_engine_rules, load_engine_rules_text
from minutiae.rules.engine.state import EngineState
from minutiae.testing import FakeClock

RULE = """
[[rule]]
id = "ib-link-downed"
kind = "ib_link_downed"
metric = "link_downed"
type = "delta"
window_s = 3600
threshold = 0
severity = "warning"
  [[rule.examples]]
  samples = [[0, 3], [300, 4]]
  alarm = true
"""


def test_round_trip_across_runs(tmp_path):
    path = tmp_path / "state" / "engine.json"
    rules = load_engine_rules_text(RULE, "t.toml")
    clock = FakeClock(1_000.0)
    results = []
    for value in (3, 3, 4):
        loaded = load_engine_state(path)
        assert loaded.warning is None
        eng = Engine(rules, clock=clock, state=loaded.state)
        eng.observe([Observation("sysfs_ib", "ib:mlx5_0/1", "link_downed", value)])
        results.append([f.attrs["value"] for f in eng.evaluate().findings])
        save_engine_state(path, eng.state)
        clock.advance(300)
    assert results == [[], [], [1.0]]
    assert not [p for p in path.parent.iterdir() if p.name != "engine.json"]  # no temp files left


def test_missing_file_is_fresh_without_warning(tmp_path):
    loaded = load_engine_state(tmp_path / "none.json")
    assert loaded.warning is None and loaded.state.rules == {}


@pytest.mark.parametrize("content", [b"", b"{not json", b"\x00\xff" * 100, b'{"version": 1, "rules": []}',
                                     b'{"version": 1, "rules": {"r": {"k": {"samples": 5}}}}'])
def test_corrupt_file_warns_and_starts_afresh(tmp_path, content):
    path = tmp_path / "engine.json"
    path.write_bytes(content)
    loaded = load_engine_state(path)
    assert loaded.state.rules == {} and loaded.warning is not None
    assert str(path) in loaded.warning and "starting afresh" in loaded.warning


def test_huge_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(state_file, "MAX_BYTES", 10)
    path = tmp_path / "engine.json"
    path.write_text(EngineState().to_json())
    assert "too large" in (load_engine_state(path).warning or "")


def test_unwritable_directory_names_the_path(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can write anywhere")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    with pytest.raises(InputError) as exc:
        save_engine_state(d / "engine.json", EngineState())
    assert "engine.json" in str(exc.value)
    d.chmod(0o700)
    assert list(d.iterdir()) == []





JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_property_any_json_state_is_state_or_data_error(doc):
    for text in (json.dumps(doc), json.dumps({"version": 1, "rules": doc}),
                 json.dumps({"version": 1, "rules": {"r": doc}}),
                 json.dumps({"version": 1, "rules": {"r": {"k": doc}}})):
        with contextlib.suppress(DataError):
            EngineState.from_json(text)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(
    ["id", "kind", "on", "type", "op", "threshold", "severity", "action", "window_s", "per_s",
     "match_code", "flap_transitions", "examples", "message", "metric", "group_by"]), JSON, max_size=10))
def test_property_any_rule_table_is_rule_or_config_error(table):
    with contextlib.suppress(ConfigError):
        build_engine_rules({"rule": [table]}, "fuzz.toml")

"""Counter rules over time: persistence (for_s), healthy delay (clear_after_s) and flapping
(type flap), applied by the check engine to the counter rules' verdicts, across one-shot runs
through the state file; the schema of the new keys; the parsed-catalog cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import ConfigError
from minutiae.model import Action, Observation, Severity, Status
from minutiae.node.check import CheckConfig, CheckMemory, run_check
from minutiae.rules.cache import NAME, load_cached, store_cached
from minutiae.rules.counters.gate import engine_rule, gated_findings, run_sequence
from minutiae.rules.counters.load import build_rules, counter_rules, load_rules
from minutiae.rules.counters.model import Context, judge
from minutiae.rules.engine.engine import Engine
from minutiae.rules.engine.rules import build_engine_rules, shipped_engine_rules
from minutiae.rules.logs import catalog_text, parse_toml
from minutiae.testing import FakeClock
from minutiae.testing.sysfs import ib_port, ib_tree, set_file

IB = ("infiniband", "gpud", "sys-class-infiniband-h100.0")
H100_Q = ("nvidia_smi", "gpud", "nvidia-smi-query.535.161.08.out.0.valid")


def _rule(rid: str):  # type: ignore[no-untyped-def]
    return next(r for r in counter_rules() if r.id == rid)


# ------------------------------------------------------------------ the shipped gated rules
def test_every_sequence_example_of_the_shipped_catalog_runs() -> None:
    doc = parse_toml(catalog_text("counters.toml"), "counters.toml")
    gated = [item for item in doc["rule"] if "sequence" in item]
    assert {i["id"] for i in gated} == {"gpu.throttle-hw", "gpu.throttle-sw-thermal", "ib.port-down",
                                         "ib.port-flapping", "ib.frontend-port-down",
                                         "ib.port-count-expected"}
    for item in gated:
        rule = _rule(item["id"])
        outcomes = set()
        for ex in item["sequence"]:
            steps = [(float(s["t"]), s["values"]) for s in ex["steps"]]
            assert run_sequence(rule, steps) is ex["alarm"], (item["id"], ex)
            outcomes.add(ex["alarm"])
        assert outcomes == {True, False}


def test_throttle_rules_persist_5_minutes_and_clear_after_5_healthy() -> None:
    for rid in ("gpu.throttle-hw", "gpu.throttle-sw-thermal"):
        g = _rule(rid).gate
        assert g is not None and (g.for_s, g.clear_after_s, g.flap) == (300.0, 300.0, False)


def test_ib_flap_rule_is_a_warning_of_kind_ib_link() -> None:
    r = _rule("ib.port-flapping")
    assert (r.kind, r.severity, r.action) == ("ib_link", Severity.WARNING, Action.NONE)
    assert r.gate is not None and (r.gate.flap, r.gate.count, r.gate.window_s) == (True, 3, 3600.0)
    e = engine_rule(r)
    assert (e.type, e.op, e.threshold, e.window_s, e.clear_after_s) == ("onsets", ">=", 3, 3600.0, 1800.0)


def test_a_10_second_throttle_never_warns_a_lasting_one_does() -> None:
    rule = _rule("gpu.throttle-hw")
    brief = [(0.0, {"clock_event_reasons": 0x88}), (10.0, {"clock_event_reasons": 0x0})]
    brief += [(float(t), {"clock_event_reasons": 0x0}) for t in range(20, 1200, 10)]
    assert run_sequence(rule, brief) is False
    # the agent's 10 s cycle: throttled from t=0 on; alarmed from t=300 on, not before
    assert run_sequence(rule, [(float(t), {"clock_event_reasons": 0x88}) for t in range(0, 300, 10)]) is False
    assert run_sequence(rule, [(float(t), {"clock_event_reasons": 0x88}) for t in range(0, 310, 10)]) is True


def test_flap_message_counts_the_downs_and_names_the_port() -> None:
    rule = _rule("ib.port-flapping")
    state = None
    out = None
    for t, s in [(0, "ACTIVE"), (60, "DOWN"), (120, "ACTIVE"), (600, "DOWN"), (660, "ACTIVE"),
                 (1200, "DOWN"), (1260, "ACTIVE")]:
        ctx = Context({"ib:mlx5_3/1": {"state": s}}, {}, 1e9 + t)
        out = gated_findings([rule], judge([rule], ctx), 1e9 + t, state)
        state = out.state
    assert out is not None and len(out.findings) == 1
    f = out.findings[0]
    assert f.message == ("mlx5_3/1: the link went down 3 times within 1 h (state now ACTIVE): "
                         "check the cable and transceiver")
    assert (f.kind, f.component, f.attrs["count"], f.attrs["flapping"], f.attrs["since"]) == (
        "ib_link", "ib:mlx5_3/1", 3, True, 1e9 + 1200)


# ------------------------------------------------------------------ one-shot runs, state file
@pytest.fixture()
def sysroot(realdata: Path, tmp_path: Path) -> Path:
    return ib_tree(tmp_path / "sys", realdata.joinpath(*IB))


def test_throttle_persists_across_one_shot_runs_through_the_state_file(realdata: Path, tmp_path: Path) -> None:
    state = tmp_path / "state" / "check.json"
    cfg = CheckConfig(sysfs_root=tmp_path, kmsg=None, nvidia_smi_xml=realdata.joinpath(*H100_Q),
                      node="n", checks=("gpu",), state_file=state)
    clock = FakeClock()
    assert run_check(cfg, clock).status is Status.OK
    saved = json.loads(state.read_text())["counter_gates"]["rules"]["gpu.throttle-hw"]
    assert len(saved) == 8 and saved["gpu:0000:19:00.0"]["bad_since"] == clock.now()
    clock.advance(300)
    second = run_check(cfg, clock)
    assert second.status is Status.WARNING
    assert sorted({f.rule for f in second.findings}) == ["gpu.throttle-hw"]
    # two sightings a day apart are not "held for 5 minutes": the stretch starts again
    later = CheckConfig(sysfs_root=tmp_path, kmsg=None, nvidia_smi_xml=realdata.joinpath(*H100_Q),
                        node="n", checks=("gpu",), state_file=tmp_path / "other.json")
    run_check(later, clock)
    clock.advance(86400)
    assert run_check(later, clock).status is Status.OK


def test_ib_port_flapping_across_one_shot_runs(sysroot: Path, tmp_path: Path) -> None:
    state = tmp_path / "check.json"
    cfg = CheckConfig(sysfs_root=sysroot, kmsg=None, node="n", checks=("ib",), state_file=state)
    port = ib_port(sysroot, "mlx5_0")
    clock = FakeClock()

    def run(text: str, dt: float) -> list[tuple[str | None, str | None]]:
        clock.advance(dt)
        set_file(sysroot, f"{port}/state", text)
        r = run_check(cfg, clock)
        return [(f.rule, f.component) for f in r.findings if f.kind == "ib_link"]

    assert run("4: ACTIVE", 0) == []
    assert run("1: DOWN", 60) == []      # down: ib.port-down (critical), not flapping
    assert run("4: ACTIVE", 60) == []    # one flap is not flapping
    assert run("1: DOWN", 600) == []
    assert run("4: ACTIVE", 60) == []
    assert run("1: DOWN", 600) == [("ib.port-flapping", "ib:mlx5_0/1")]  # 3rd down within the hour
    assert run("4: ACTIVE", 60) == [("ib.port-flapping", "ib:mlx5_0/1")]  # up again, still flapping
    assert run("4: ACTIVE", 3000) == [("ib.port-flapping", "ib:mlx5_0/1")]  # 2 downs in window: healthy delay
    assert run("4: ACTIVE", 1800) == []  # healthy for 30 min: cleared


def test_damaged_timer_state_is_a_note_and_starts_again(sysroot: Path, tmp_path: Path) -> None:
    state = tmp_path / "check.json"
    cfg = CheckConfig(sysfs_root=sysroot, kmsg=None, node="n", checks=("ib",), state_file=state)
    run_check(cfg, FakeClock())
    doc = json.loads(state.read_text())
    doc["counter_gates"] = {"version": 99, "rules": "garbage"}
    state.write_text(json.dumps(doc))
    r = run_check(cfg, FakeClock())
    assert r.notes == ("counter-rule timers were damaged in the state file; they start again",)
    assert json.loads(state.read_text())["counter_gates"]["version"] == 1  # rewritten afresh


def test_a_gpu_missing_for_a_cycle_keeps_its_timer() -> None:
    rule = _rule("gpu.throttle-hw")
    hot = {"gpu:0000:19:00.0": {"clock_event_reasons": 0x88}}
    t0 = 1e9
    out = gated_findings([rule], judge([rule], Context(hot, {}, t0)), t0)
    out = gated_findings([rule], [], t0 + 150, out.state)   # the GPU source failed
    assert out.findings == () and "gpu:0000:19:00.0" in out.state.rules["gpu.throttle-hw"]
    out = gated_findings([rule], judge([rule], Context(hot, {}, t0 + 300)), t0 + 300, out.state)
    assert [f.component for f in out.findings] == ["gpu:0000:19:00.0"]


def test_a_cleared_throttle_keeps_its_last_message_during_the_healthy_delay() -> None:
    rule = _rule("gpu.throttle-hw")
    comp = "gpu:0000:19:00.0"
    state = None
    for dt, bits in ((0, 0x88), (300, 0x88), (400, 0x0)):
        ctx = Context({comp: {"clock_event_reasons": bits}}, {}, 1e9 + dt)
        out = gated_findings([rule], judge([rule], ctx), 1e9 + dt, state)
        state = out.state
    (f,) = out.findings
    assert f.message == "GPU 0000:19:00.0: clocks held down by hw_slowdown, hw_power_brake_slowdown"
    assert f.attrs["holding"] is False and f.attrs["since"] == 1e9 + 300


# ------------------------------------------------------------------ schema
def _doc(extra: str) -> dict:  # type: ignore[type-arg]
    return parse_toml(f"""
[[rule]]
id = "t"
kind = "throttle"
component = "gpu"
metric = "clock_event_reasons"
op = "bits_any"
bits = ["hw_slowdown"]
severity = "warning"
action = "none"
message = "m"
example = [{{ values = {{ clock_event_reasons = 0x8 }}, fires = true }}]
{extra}
""", "site.toml")


SEQ_OK = ('sequence = [{ steps = [{ t = 0, values = { clock_event_reasons = 8 } }, '
          '{ t = 60, values = { clock_event_reasons = 8 } }], alarm = true }, '
          '{ steps = [{ t = 0, values = { clock_event_reasons = 8 } }], alarm = false }]')


@pytest.mark.parametrize(("extra", "error"), [
    ("for_s = -1\n" + SEQ_OK, "for_s must be a number of seconds >= 0"),
    ("for_s = 60", "needs sequence"),
    (SEQ_OK, "sequence examples need for_s"),
    ('type = "flap"\nwindow_s = 60\n' + SEQ_OK, "type flap needs count"),
    ('type = "flap"\ncount = 2\n' + SEQ_OK, "type flap needs window_s > 0"),
    ('type = "wobble"', "type must be 'condition' or 'flap'"),
    ("count = 3\nfor_s = 60\n" + SEQ_OK, "count and window_s belong to type = 'flap'"),
    ("for_s = 120\n" + SEQ_OK, "sequence #0 should alarm"),
    ('for_s = 60\nsequence = [{ steps = [{ t = 0, values = { clock_event_reasons = 8 } }], alarm = false }]',
     "needs sequence examples that alarm and that do not"),
    ('for_s = 60\nsequence = [{ steps = [{ t = 5, values = {} }, { t = 1, values = {} }], alarm = true }]',
     "each step needs t"),
])
def test_invalid_gates_name_the_rule(extra: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error) as exc:
        build_rules(_doc(extra), "site.toml")
    assert "site.toml: rule 't'" in str(exc.value)


def test_a_valid_site_gate_loads() -> None:
    (rule,) = build_rules(_doc("for_s = 60\n" + SEQ_OK), "site.toml")
    assert rule.gate is not None and rule.gate.for_s == 60.0


def test_flap_rules_cannot_count_counter_increases() -> None:
    doc = parse_toml("""
[[rule]]
id = "t"
kind = "ib_link"
component = "ib"
metric = "link_downed"
op = "increase"
threshold = 0
type = "flap"
count = 2
window_s = 60
severity = "warning"
action = "none"
message = "m"
example = [{ values = { link_downed = 2 }, previous = { link_downed = 1 }, fires = true }]
sequence = []
""", "s")
    with pytest.raises(ConfigError, match="use a state condition"):
        build_rules(doc, "s")


# ------------------------------------------------------------------ engine: onsets, max_gap_s
def test_engine_onsets_count_starts_in_the_window_and_keep_only_changes() -> None:
    (rule,) = build_engine_rules(parse_toml("""
[[rule]]
id = "o"
kind = "k"
metric = "m"
type = "onsets"
window_s = 100
threshold = 2
severity = "warning"
  [[rule.examples]]
  samples = [[0, 0], [10, 1], [20, 0], [30, 1]]
  alarm = true
""", "o"), "o")
    clock = FakeClock(start=0.0)
    eng = Engine([rule], clock=clock)
    for t, v in [(0, 1), (10, 1), (20, 0), (30, 1), (40, 1), (50, 0), (60, 1)]:
        clock.advance(t - clock.now())
        eng.observe([Observation("s", "c", "m", v, float(t))])
        eng.evaluate()
    ks = eng.state.rules["o"]["c"]
    # a value that was true from the first sample on is no start; 30 and 60 are
    assert ks.value == 2 and ks.active
    assert [v for _, v in ks.samples] == [1, 0, 1, 0, 1]
    clock.advance(75)  # t = 135: the start at 30 left the window
    eng.evaluate()
    assert ks.value == 1 and not ks.active


def test_engine_max_gap_restarts_a_stretch() -> None:
    (rule,) = build_engine_rules(parse_toml("""
[[rule]]
id = "g"
kind = "k"
metric = "m"
threshold = 0
for_s = 60
max_gap_s = 100
severity = "warning"
  [[rule.examples]]
  samples = [[0, 1], [60, 1]]
  alarm = true
""", "g"), "g")
    clock = FakeClock(start=0.0)
    eng = Engine([rule], clock=clock)
    for t in (0, 200, 250):
        clock.advance(t - clock.now())
        eng.observe([Observation("s", "c", "m", 1, float(t))])
        eng.evaluate()
    assert not eng.state.rules["g"]["c"].active  # 200 → 250 is only 50 s of seen persistence
    clock.advance(10)
    eng.observe([Observation("s", "c", "m", 1, clock.now())])
    eng.evaluate()
    assert eng.state.rules["g"]["c"].active


# ------------------------------------------------------------------ the parsed-catalog cache
def test_catalog_cache_is_used_while_current_and_ignored_once_stale(tmp_path: Path) -> None:
    src = tmp_path / "counters.toml"
    src.write_text(catalog_text("counters.toml"))
    cache = tmp_path / "cache"
    first = load_rules(src, cache)
    assert (cache / NAME).is_file()
    # the cached document is what a current cache entry loads (proved by editing it)
    doc = json.loads((cache / NAME).read_text())
    entry = doc["files"][str(src)]
    entry["doc"]["rule"][0]["message"] = "from the cache"
    (cache / NAME).write_text(json.dumps(doc))
    assert load_rules(src, cache)[0].message == "from the cache"
    # the catalog changed: its mtime/size no longer match, the file is parsed again
    src.write_text(src.read_text() + "\n# edited\n")
    os.utime(src, ns=(1, 1))
    again = load_rules(src, cache)
    assert [r.message for r in again] == [r.message for r in first]


def test_engine_rule_cache(tmp_path: Path) -> None:
    plain = shipped_engine_rules()
    assert shipped_engine_rules(tmp_path) == plain  # miss: parsed and stored
    assert (tmp_path / NAME).is_file()
    assert shipped_engine_rules(tmp_path) == plain  # hit


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_a_garbage_cache_is_a_miss_never_a_crash(data: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        cache = Path(d)
        (cache / NAME).write_bytes(data)
        src = cache / "x.toml"
        src.write_text("a = 1\n")
        assert load_cached(src, cache) is None or isinstance(load_cached(src, cache), dict)
        assert store_cached(src, cache, (), {"a": 1})
        assert load_cached(src, cache) == {"a": 1}


def test_an_unwritable_cache_dir_is_no_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    src = tmp_path / "x.toml"
    src.write_text("a = 1\n")
    assert store_cached(src, blocker / "sub", (), {"a": 1}) is False
    assert load_cached(src, blocker / "sub") is None


def test_in_process_memory_keeps_gates_without_a_state_file(realdata: Path, tmp_path: Path) -> None:
    cfg = CheckConfig(sysfs_root=tmp_path, kmsg=None, nvidia_smi_xml=realdata.joinpath(*H100_Q),
                      node="n", checks=("gpu",))
    mem, clock = CheckMemory(), FakeClock()
    run_check(cfg, clock, memory=mem)
    assert mem.gates is not None
    assert set(mem.gates["rules"]) == {"gpu.throttle-hw", "gpu.throttle-sw-thermal"}
    assert len(mem.gates["rules"]["gpu.throttle-hw"]) == 8  # one timer per GPU
    assert CheckMemory.from_json(json.loads(json.dumps(mem.to_json()))).gates == mem.gates


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.sampled_from(["version", "boot_time", "rules"]), _json, max_size=3),
       st.dictionaries(st.sampled_from(["gpu:0000:19:00.0", "x"]), _json, max_size=2))
def test_any_damaged_gate_state_is_fresh_timers_or_usable(doc: dict, keys: dict) -> None:  # type: ignore[type-arg]
    from minutiae.errors import MinutiaeError
    from minutiae.rules.engine.state import EngineState

    doc = {**doc, "version": 1, "rules": {"gpu.throttle-hw": keys}} if keys else doc
    rule = _rule("gpu.throttle-hw")
    try:
        state = EngineState.from_dict(doc)
    except MinutiaeError:
        return
    ctx = Context({"gpu:0000:19:00.0": {"clock_event_reasons": 0x88}}, {}, 2e9)
    out = gated_findings([rule], judge([rule], ctx), 2e9, state)
    assert all(f.rule == "gpu.throttle-hw" for f in out.findings)
    json.dumps(out.state.to_dict())  # still serialisable

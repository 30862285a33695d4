"""Engine semantics with an injected clock: thresholds, rates with counter resets, counts in a
window, boot grace, persistence, healthy delay, flapping, state round trip; every example of
every shipped engine rule runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from minutiae.errors import ConfigError, DataError
from minutiae.model import Action, Finding, Observation, Severity
from minutiae.rules.engine.engine import Engine, run_example
from minutiae.rules.engine.rules import (
    build_engine_rules,
    load_engine_rules_text,
    shipped_engine_rules,
)
from minutiae.rules.engine.state import EngineState
from minutiae.testing import FakeClock

# An example counters rule file, written against the schema in docs/rules.md.
COUNTERS = """
[[rule]]
id = "ib-symbol-errors-rate"
kind = "ib_symbol_errors"
source = "sysfs_ib"
metric = "symbol_error"
component = "ib:*"
type = "rate"
window_s = 3600
per_s = 3600
op = ">"
threshold = 10
for_s = 600
clear_after_s = 1800
severity = "warning"
action = "none"
message = "{component}: {value:.0f} symbol errors per hour (> {threshold})"
  [[rule.examples]]
  samples = [[0, 100], [600, 200], [1200, 300], [1800, 400]]
  alarm = true
  [[rule.examples]]
  samples = [[0, 100], [600, 101], [1200, 102]]
  alarm = false

[[rule]]
id = "ib-port-state"
kind = "ib_port_down"
metric = "state"
type = "threshold"
op = "!="
threshold = "ACTIVE"
flap_transitions = 4
flap_window_s = 3600
flap_severity = "error"
flap_action = "inspect"
severity = "warning"
action = "none"
boot_grace_s = 300
  [[rule.examples]]
  samples = [[0, "DOWN"], [60, "ACTIVE"], [120, "DOWN"], [180, "ACTIVE"]]
  alarm = false
  flapping = true
  [[rule.examples]]
  boot_at = 0
  samples = [[10, "DOWN"], [100, "DOWN"]]
  alarm = false

[[rule]]
id = "xid13-repeats"
kind = "xid"
on = "finding"
match_kind = "xid"
match_code = [13, 31]
group_by = "pci"
window_s = 3600
threshold = 5
severity = "warning"
action = "none"
message = "{value} application-class Xids on {component} within {window_s:.0f} s"
  [[rule.examples]]
  samples = [0, 10, 20, 30, 40]
  alarm = true
"""


def rules():
    return load_engine_rules_text(COUNTERS, "test-counters.toml")


def rule(rid):
    return next(r for r in rules() if r.id == rid)


def obs(value, t, comp="ib:mlx5_0/1", metric="symbol_error"):
    return Observation(source="sysfs_ib", component=comp, metric=metric, value=value, time=t)


def test_rate_with_persistence_and_healthy_delay():
    clock = FakeClock(1000.0)
    eng = Engine([rule("ib-symbol-errors-rate")], clock=clock, node="gpu001")
    values = [0, 50, 100, 150, 200]  # 50 per 10 min = 300/h
    alarms = []
    for v in values:
        eng.observe([obs(v, clock.now())])
        res = eng.evaluate()
        alarms.append(bool(res.findings))
        clock.advance(600)
    # rate first computable at the 2nd sample (t=600): bad since then; for_s=600 → alarm at 3rd
    assert alarms == [False, False, True, True, True]
    f = eng.evaluate().findings[0]
    assert f.kind == "ib_symbol_errors" and f.component == "ib:mlx5_0/1"
    assert f.attrs["value"] == pytest.approx(300.0)
    assert f.message == "ib:mlx5_0/1: 300 symbol errors per hour (> 10)"
    # counter stops increasing: healthy, but clears only after clear_after_s=1800
    cleared, healthy = [], []
    ks = eng.state.rules["ib-symbol-errors-rate"]["ib:mlx5_0/1"]
    for _ in range(16):
        eng.observe([obs(200, clock.now())])
        res = eng.evaluate()
        cleared.append(not res.findings)
        healthy.append(ks.value <= 10)
        clock.advance(600)
    first_clear = cleared.index(True)
    first_healthy = healthy.index(True)
    assert all(cleared[first_clear:]) and all(healthy[first_healthy:])
    # alarmed while healthy for 1800 s (3 evaluations), cleared at the 4th
    assert first_clear - first_healthy == 3
    cond = eng.evaluate().conditions[0]
    assert not cond.active and cond.reason == "IbSymbolErrorsRate" and cond.node == "gpu001"


def test_counter_reset_is_not_a_negative_rate():
    clock = FakeClock(0.0)
    eng = Engine([rule("ib-symbol-errors-rate")], clock=clock)
    for t, v in [(0, 1_000_000), (600, 1_000_010), (1200, 5)]:  # reset (reboot/driver reload)
        clock._now = float(t)
        eng.observe([obs(v, float(t))])
        eng.evaluate()
    ks = eng.state.rules["ib-symbol-errors-rate"]["ib:mlx5_0/1"]
    # increase = 10 + 5 over 1200 s = 45/h
    assert ks.value == pytest.approx(45.0)


def test_threshold_text_flapping_and_boot_grace():
    r = rule("ib-port-state")
    clock = FakeClock(10_000.0)
    eng = Engine([r], clock=clock, boot_time=0.0)
    for state in ["DOWN", "ACTIVE", "DOWN", "ACTIVE", "DOWN"]:
        eng.observe([obs(state, clock.now(), metric="state")])
        res = eng.evaluate()
        clock.advance(60)
    (f,) = res.findings
    assert f.attrs["flapping"] is True
    assert f.severity is Severity.ERROR and f.action is Action.INSPECT
    assert res.conditions[0].reason == "IbPortStateFlapping"
    # within the grace period after boot nothing is even recorded
    clock2 = FakeClock(5_000.0)
    eng2 = Engine([r], clock=clock2, boot_time=4_900.0)
    eng2.observe([obs("DOWN", clock2.now(), metric="state")])
    assert eng2.evaluate().findings == ()
    clock2.advance(400)
    eng2.observe([obs("DOWN", clock2.now(), metric="state")])
    assert [x.kind for x in eng2.evaluate().findings] == ["ib_port_down"]


def _xid(code, t, pci="0000:44:00.0"):
    return Finding(kind="xid", severity=Severity.WARNING, action=Action.RESTART_APP,
                   message=f"Xid {code}", code=code, pci=pci, line=f"NVRM: Xid {code}",
                   time=datetime.fromtimestamp(t, UTC))


def test_count_in_window_per_gpu_and_reboot_resets():
    r = rule("xid13-repeats")
    clock = FakeClock(100_000.0)
    eng = Engine([r], clock=clock, boot_time=90_000.0)
    now = clock.now()
    eng.record([_xid(13, now - 4000)] + [_xid(13, now - i) for i in range(4)]
               + [_xid(79, now)] + [_xid(31, now, pci="0000:9b:00.0")])
    assert eng.evaluate().findings == ()  # 4 in the window on 44:00.0 (one is older), 1 on 9b
    eng.record([_xid(31, now)])
    (f,) = eng.evaluate().findings
    assert f.pci == "0000:44:00.0" and f.attrs["value"] == 5
    assert f.line == "NVRM: Xid 31"
    # the node rebooted: counts are "since boot"
    eng2 = Engine([r], clock=clock, boot_time=99_000.0,
                  state=EngineState.from_json(eng.state.to_json()))
    assert eng2.evaluate().findings == ()


def test_state_round_trip_keeps_rates_across_one_shot_runs():
    r = rule("ib-symbol-errors-rate")
    clock = FakeClock(0.0)
    state_text = EngineState().to_json()
    alarms = []
    for i in range(4):  # four separate "processes", state carried as JSON text
        eng = Engine([r], clock=clock, state=EngineState.from_json(state_text))
        eng.observe([obs(i * 100, clock.now())])
        alarms.append(bool(eng.evaluate().findings))
        state_text = eng.state.to_json()
        clock.advance(600)
    assert alarms == [False, False, True, True]
    assert json.loads(state_text)["version"] == 1


@pytest.mark.parametrize("bad", [
    "", "[]", "{\"version\": 99}", "{\"version\": 1, \"rules\": {\"x\": {\"k\": {\"samples\": [[\"a\", 1]]}}}}",
    "\x00\x01garbage",
])
def test_corrupt_state_raises_data_error(bad):
    with pytest.raises(DataError):
        EngineState.from_json(bad)


@pytest.mark.parametrize("snippet, needle", [
    ('[[rule]]\nid="r1"\nkind="x"\nseverity="loud"\n[[rule.examples]]\nsamples=[[0,1]]\nalarm=true',
     "r1"),
    ('[[rule]]\nid="r2"\nkind="x"\nseverity="warning"\ntype="rate"\nthreshold=1\n[[rule.examples]]\nsamples=[[0,1]]\nalarm=true',
     "window_s"),
    ('[[rule]]\nid="r3"\nkind="x"\nseverity="warning"\nthreshold=1', "examples"),
    ('[[rule]]\nid="r4"\nkind="x"\nseverity="warning"\nop="~"\n[[rule.examples]]\nsamples=[[0,1]]\nalarm=true',
     "op"),
    ('[[rule]]\nid="r5"\nkind="x"\nseverity="warning"\nthreshold="UP"\n[[rule.examples]]\nsamples=[[0,1]]\nalarm=true',
     "text threshold"),
    ('[[rule]]\nid="r6"\nkind="x"\nseverity="warning"\nbogus=1\n[[rule.examples]]\nsamples=[[0,1]]\nalarm=true',
     "bogus"),
    ("[[rule]\n", "invalid TOML"),
])
def test_bad_rules_name_the_rule(snippet, needle):
    with pytest.raises(ConfigError) as exc:
        load_engine_rules_text(snippet, "site.toml")
    assert needle in str(exc.value) and "site.toml" in str(exc.value)


def test_examples_of_test_rules_run():
    for r in rules():
        for ex in r.examples:
            alarm, flapping = run_example(r, ex)
            assert alarm == ex.alarm, (r.id, ex)
            if ex.flapping is not None:
                assert flapping == ex.flapping, (r.id, ex)


def test_examples_of_shipped_engine_rules_run():
    shipped = shipped_engine_rules()
    if not shipped:
        pytest.skip("no engine rule catalogs shipped")
    for r in shipped:
        for ex in r.examples:
            alarm, flapping = run_example(r, ex)
            assert alarm == ex.alarm, (r.id, ex)
            if ex.flapping is not None:
                assert flapping == ex.flapping, (r.id, ex)


def test_build_rejects_duplicates():
    doc = {"rule": [
        {"id": "a", "kind": "x", "severity": "info", "threshold": 1, "examples": [{"samples": [[0, 1]], "alarm": True}]},
        {"id": "a", "kind": "x", "severity": "info", "threshold": 1, "examples": [{"samples": [[0, 1]], "alarm": True}]},
    ]}
    with pytest.raises(ConfigError, match="duplicate"):
        build_engine_rules(doc, "d.toml")


def test_shipped_log_count_rules_on_a_real_xid13_burst(realdata):
    from minutiae.node.sources.kernel_log.parse import parse_text
    from minutiae.rules.log_findings import findings_from_events

    path = realdata / "kernel_logs/gpud/pkg_dmesg__dmesg.decode.iso.log.0"
    findings = list(findings_from_events(parse_text(path.read_text())))
    last = max(f.time for f in findings).timestamp()
    in_hour = sum(1 for f in findings if f.code in (13, 31) and f.time.timestamp() >= last - 3600)
    clock = FakeClock(last)
    eng = Engine(shipped_engine_rules(), clock=clock, node="gpu001")
    eng.record(findings)
    (alarm,) = eng.evaluate().findings
    assert alarm.rule == "xid-app-repeats-same-gpu" and alarm.component == "0000:38:00.0"
    assert alarm.attrs["value"] == in_hour > 10
    assert not alarm.action.drains  # application-class Xids never drain by themselves
    clock.advance(3600 + 1)  # an hour later the window is empty, and after clear_after_s it clears
    assert eng.evaluate().findings != ()
    clock.advance(3600)
    assert eng.evaluate().findings == ()


def test_uptime_only_findings_are_placed_at_boot_plus_uptime():
    """kmsg/dmesg lines carry uptime only: with the boot time known they count at their own
    time, so a one-shot check does not see a week of old events as 'now'."""
    r = rule("xid13-repeats")
    boot = 1_000_000.0
    clock = FakeClock(boot + 7 * 86400)
    eng = Engine([r], clock=clock, boot_time=boot)
    old = [Finding(kind="xid", severity=Severity.WARNING, action=Action.RESTART_APP, message="x",
                   code=13, pci="0000:44:00.0", attrs={"uptime_s": 100.0 + i}) for i in range(6)]
    eng.record(old)
    assert eng.evaluate().findings == ()  # six days ago: outside the 1 h window
    recent = [Finding(kind="xid", severity=Severity.WARNING, action=Action.RESTART_APP, message="x",
                      code=13, pci="0000:44:00.0", attrs={"uptime_s": 7 * 86400 - 60.0 + i})
              for i in range(5)]
    eng.record(recent)
    assert [f.attrs["value"] for f in eng.evaluate().findings] == [5]


def test_glob_metric_keeps_one_series_per_metric():
    (r,) = load_engine_rules_text(
        '[[rule]]\nid = "any-errors"\nkind = "ib_rcv_errors"\nmetric = "*_errors"\ntype = "delta"\n'
        'window_s = 3600\nthreshold = 5\nseverity = "warning"\n'
        '[[rule.examples]]\nsamples = [[0, 0], [60, 10]]\nalarm = true\n', "t.toml")
    clock = FakeClock(0.0)
    eng = Engine([r], clock=clock)
    for t, a, b in [(0, 100, 0), (60, 101, 1)]:  # interleaved counters must not look like jumps
        clock._now = float(t)
        eng.observe([obs(a, float(t), metric="port_rcv_errors"), obs(b, float(t), metric="symbol_errors")])
    assert eng.evaluate().findings == ()
    assert set(eng.state.rules["any-errors"]) == {"ib:mlx5_0/1|port_rcv_errors", "ib:mlx5_0/1|symbol_errors"}

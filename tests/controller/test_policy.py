"""Policy TOML: the shipped rules' own examples, and validation errors that name the key."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.controller.policy import RuleDo, load_policy, loads_policy
from minutiae.errors import ConfigError
from minutiae.model import Action

POLICY = load_policy()


@pytest.mark.parametrize(
    ("rule", "example"),
    [(r, e) for r in POLICY.rules for e in r.examples],
    ids=lambda x: getattr(x, "name", None) or f"{x.kind}-{x.code}")
def test_every_rule_example_gets_its_expected_answer(rule, example):
    got = POLICY.rule_for(example.finding())
    assert got is not None
    assert got.do is example.expect, f"{rule.name}: {example} answered by {got.name}"


def test_default_policy_is_dry_run_with_a_climbing_ladder():
    assert POLICY.dry_run is True
    assert [r.step for r in POLICY.ladder] == [Action.RESET_GPU, Action.REBOOT, Action.INSPECT]
    assert POLICY.ladder[-1].timeout_s is None
    assert POLICY.budget.domain_caps["nvl_domain"] == 1
    assert POLICY.ladder_index(Action.REBOOT) == 1


def test_application_xids_never_drain_even_when_marked_critical():
    from minutiae.model import Finding, Severity
    for code in (13, 31, 43, 45):
        f = Finding("xid", Severity.CRITICAL, Action.INSPECT, "x", code=code)
        assert POLICY.rule_for(f).do is RuleDo.IGNORE  # type: ignore[union-attr]


MINIMAL = """
[[rule]]
name = "r"
min_action = "reset_gpu"
do = "drain"
examples = [{kind = "xid", code = 79, action = "reboot", expect = "drain"}]
[[ladder]]
step = "reboot"
"""


@pytest.mark.parametrize(("extra", "key"), [
    ("bogus = 1\n", "bogus"),
    ("dry_run = 'no'\n", "dry_run"),
    ("healthy_delay_s = -5\n", "healthy_delay_s"),
    ("[budget]\nmax_unavailable_fraction = 1.5\n", "budget.max_unavailable_fraction"),
    ("[budget.domain_caps]\nrack = -1\n", "budget.domain_caps.rack"),
    ("[budget.rate.reboot]\nper_minute = 1\n", "budget.rate.reboot"),
    ("[budget.storm]\nwindow_s = 'x'\n", "budget.storm.window_s"),
    ("[lemon]\ndrains = 0\n", "lemon.drains"),
    ("fleet_nodes = '(gpu'\n", "fleet_nodes"),
    ("fleet_nodes = 3\n", "fleet_nodes"),
])
def test_bad_values_name_the_key(extra, key):
    with pytest.raises(ConfigError) as e:
        loads_policy(extra + MINIMAL, "my.toml")
    assert f"my.toml: {key}" in str(e.value)


def test_fleet_nodes_selects_the_schedulers_nodes_this_controller_looks_after():
    pol = loads_policy("fleet_nodes = 'gpu0(09|[1-3][0-9]|40)'\n" + MINIMAL)
    assert [n for n in (f"gpu{i:03d}" for i in range(1, 65)) if pol.in_fleet(n)] == \
        [f"gpu{i:03d}" for i in range(9, 41)]
    assert loads_policy(MINIMAL).in_fleet("anything")


def test_rule_errors_name_the_rule():
    bad = MINIMAL.replace('do = "drain"', 'do = "explode"')
    with pytest.raises(ConfigError, match=r"rule\[r\]\.do"):
        loads_policy(bad, "p.toml")
    no_ex = MINIMAL.replace('examples = [{kind = "xid", code = 79, action = "reboot", '
                            'expect = "drain"}]', "")
    with pytest.raises(ConfigError, match=r"rule\[r\]\.examples: every rule needs"):
        loads_policy(no_ex, "p.toml")
    down = MINIMAL + '[[ladder]]\nstep = "reset_gpu"\n'
    with pytest.raises(ConfigError, match=r"ladder\[1\]\.step: rungs must go up"):
        loads_policy(down, "p.toml")


def test_unreadable_and_non_toml_files_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read policy"):
        load_policy(tmp_path / "absent.toml")
    p = tmp_path / "p.toml"
    p.write_bytes(b"\xff\xfe[[rule")
    with pytest.raises(ConfigError, match=f"{p}: policy is not UTF-8"):
        load_policy(p)
    p.write_text("[[rule]\nname=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_policy(p)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_garbage_never_crashes_the_loader(text):
    try:
        loads_policy(text, "fuzz.toml")
    except ConfigError as e:
        assert str(e).startswith("fuzz.toml")


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=len(MINIMAL) - 1))
def test_truncated_policy_is_a_clear_error_or_valid(n):
    try:
        loads_policy(MINIMAL[:n], "cut.toml")
    except ConfigError as e:
        assert str(e).startswith("cut.toml")

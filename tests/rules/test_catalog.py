"""kernel_log.toml: every rule's examples produce its event through the real parser, its
counter-examples do not, every DESIGN.md log kind has a rule, and a bad rule is a ConfigError
that names it."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import ConfigError
from minutiae.model import LOG_KINDS
from minutiae.node.sources.kernel_log.parse import KernelLogParser, parse_text
from minutiae.rules.log_findings import findings_from_events
from minutiae.rules.logs import (
    build_log_rules,
    catalog_text,
    kernel_log_rules,
    load_log_rules,
    parse_toml,
)

RULES = kernel_log_rules()


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_examples_and_counter_examples(rule):
    for ex in rule.examples:
        evs = parse_text(ex, year=2025)
        hits = [e for e in evs if e.attrs["rule"] == rule.id]
        assert len(hits) == 1, (rule.id, ex, [(e.kind, e.attrs["rule"]) for e in evs])
        assert hits[0].kind == rule.kind
        (f,) = [f for f in findings_from_events(hits)]
        assert f.rule == rule.id and "?" not in f.message.replace("(?)", ""), f.message
    for cex in rule.counter_examples:
        assert not [e for e in parse_text(cex, year=2025) if e.attrs["rule"] == rule.id], (rule.id, cex)


def test_every_log_kind_has_a_rule():
    assert {r.kind for r in RULES} >= LOG_KINDS


def test_aer_severities_and_ib_states():
    evs = parse_text(
        "[1.0] nvidia 0000:3b:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n"
        "[1.1] nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)\n"
        "[1.2] nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrectable (Fatal), type=Transaction Layer, (Receiver ID)\n")
    assert [(e.kind, e.attrs["severity"], e.pci) for e in evs] == [
        ("pcie_aer", "corrected", "0000:3b:00.0"), ("pcie_aer", "nonfatal", "0000:3b:00.0"),
        ("pcie_aer", "fatal", "0000:3b:00.0")]
    f = list(findings_from_events(evs))
    assert [x.severity.label for x in f] == ["info", "error", "critical"]
    assert f[2].action.drains and not f[0].action.drains


def test_shipped_catalog_text_is_valid_toml():
    doc = parse_toml(catalog_text("kernel_log.toml"), "kernel_log.toml")
    assert len(doc["rule"]) == len(RULES)


def _rule(**over):
    base = {"id": "r1", "kind": "soft_lockup", "keywords": ["lockup"], "pattern": "lockup",
            "severity": "warning", "action": "none", "examples": ["soft lockup here"]}
    base.update(over)
    return {"require_all_kinds": False, "rule": [base]}


@pytest.mark.parametrize("over, needle", [
    ({"pattern": "("}, "bad pattern regex"),
    ({"severity": "loud"}, "unknown severity"),
    ({"action": "pray"}, "unknown action"),
    ({"keywords": []}, "keywords"),
    ({"examples": []}, "example"),
    ({"examples": ["nothing to see"]}, "none of the keywords"),
    ({"examples": ["lockup"], "pattern": "LOCKUP"}, "does not match its example"),
    ({"counter_examples": ["soft lockup"]}, "matches its counter-example"),
    ({"catalog": "xid"}, "code"),
    ({"kind": "Bad Kind"}, "kind"),
    ({"frobnicate": 1}, "unknown keys"),
    ({"join_back": 3}, "join_start"),
    ({"component": "GPU 0"}, "component"),
    ({"component": 3}, "component"),
])
def test_bad_rule_names_the_rule(over, needle):
    with pytest.raises(ConfigError) as exc:
        build_log_rules(_rule(**over), "site.toml")
    assert "r1" in str(exc.value) and needle in str(exc.value)


def test_catalog_must_cover_every_kind_unless_site_file():
    with pytest.raises(ConfigError, match="no rule for kinds"):
        build_log_rules({"rule": _rule()["rule"]}, "x.toml")


def test_site_rule_file_adds_a_rule(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(
        'require_all_kinds = false\n[[rule]]\nid = "gpu-clock-warn"\nkind = "site_gpu_clock"\n'
        'keywords = ["clocks throttled"]\npattern = \'GPU (?P<pci>\\S+) clocks throttled\'\n'
        'severity = "warning"\naction = "none"\nmessage = "GPU {pci} clocks throttled"\n'
        'examples = ["[ 1.0] NVRM: GPU 0000:44:00.0 clocks throttled"]\n', encoding="utf-8")
    rules = load_log_rules(path)
    (ev,) = KernelLogParser(rules).parse_lines(["x", "[ 2.0] NVRM: GPU 0000:44:00.0 clocks throttled"])
    assert (ev.kind, ev.pci, ev.line_no) == ("site_gpu_clock", "0000:44:00.0", 2)
    (f,) = findings_from_events([ev], rules=rules)
    assert f.message == "GPU 0000:44:00.0 clocks throttled"
    assert f.component is None  # the site rule says no component: none is guessed from its kind


def test_a_rules_component_comes_from_its_toml_entry(tmp_path):
    """The component of a kernel-log finding is the rule's ``component`` field (no table in the
    code): a site rule of a new kind that names one gets ``<component>:<pci>``."""
    path = tmp_path / "site.toml"
    path.write_text(
        'require_all_kinds = false\n[[rule]]\nid = "nvme-timeout"\nkind = "site_nvme"\n'
        'component = "nvme"\nkeywords = ["nvme"]\npattern = \'nvme \\S+: I/O \\d+ QID \\d+ timeout\'\n'
        'severity = "warning"\naction = "none"\n'
        'examples = ["[ 9.0] nvme nvme0: I/O 12 QID 3 timeout, aborting"]\n', encoding="utf-8")
    rules = load_log_rules(path)
    assert rules[0].component == "nvme"
    # drivers/nvme/host/pci.c "I/O %d QID %d timeout, aborting", logged on the PCI device
    (ev,) = KernelLogParser(rules).parse_lines(["[ 9.0] nvme 0000:c1:00.0: I/O 12 QID 3 timeout, aborting"])
    (f,) = findings_from_events([ev], rules=rules)
    assert (f.pci, f.component) == ("0000:c1:00.0", "nvme:0000:c1:00.0")


def test_shipped_components() -> None:
    by_kind = {r.kind: r.component for r in RULES}
    assert (by_kind["xid"], by_kind["sxid"], by_kind["pcie_aer"], by_kind["ib_link"]) == (
        "gpu", "nvswitch", "pcie", "nic")
    assert by_kind["mce"] is None and by_kind["oom_kill"] is None
    (f,) = findings_from_events(parse_text(
        "[ 611.0] NVRM: Xid (PCI:0000:44:00): 79, pid=1, GPU has fallen off the bus."))
    assert f.component == "gpu:0000:44:00.0"


def test_unreadable_rule_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_log_rules(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe[[rule")
    with pytest.raises(ConfigError, match="bad.toml"):
        load_log_rules(bad)




VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(
    ["id", "kind", "keywords", "pattern", "severity", "action", "message", "catalog", "attrs",
     "join_back", "join_start", "examples", "counter_examples"]), VALUES, max_size=12))
def test_property_any_log_rule_table_is_rule_or_config_error(table):
    with contextlib.suppress(ConfigError):
        build_log_rules({"require_all_kinds": False, "rule": [table]}, "fuzz.toml")


def test_one_aer_event_is_one_finding():
    # a real corrected-error burst (header, detail line, register lines): counted once
    evs = parse_text(
        "Jan  1 23:30:53 begin kernel: [   46.675818] pcieport 0000:00:1d.0: AER: Corrected error received: 0000:02:00.0\n"
        "Jan  1 23:30:53 begin kernel: [   46.675933] nvme 0000:02:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n"
        "Jan  1 23:30:53 begin kernel: [   46.676048] nvme 0000:02:00.0:   device [15b7:5006] error status/mask=00000001/0000e000\n",
        year=2021)
    (ev,) = evs
    assert (ev.pci, ev.attrs["severity"], ev.attrs["layer"], ev.line_no) == (
        "0000:02:00.0", "corrected", "Physical Layer", 2)

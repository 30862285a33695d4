"""minutiae.rules: rules as data (``catalog/*.toml``) and what time does to them (pure; README:
how to add a rule).

The public surface (``__all__`` is pinned by tests/rules/test_rules_exports.py)."""

from minutiae.rules.counters.gate import GateReplay, gated_findings
from minutiae.rules.counters.load import counter_rules, load_rules
from minutiae.rules.counters.model import Context, CounterRule, Verdict, context, evaluate, judge
from minutiae.rules.engine.engine import Engine
from minutiae.rules.engine.rules import EngineRule, shipped_engine_rules
from minutiae.rules.log_findings import LogFindingMapper, findings_from_events
from minutiae.rules.logs import (
    LogRule,
    kernel_log_rules,
    load_log_rules,
    nagios_status,
    sxid_catalog,
    xid_catalog,
)

__all__ = [
    "Context",
    "CounterRule",
    "Engine",
    "EngineRule",
    "GateReplay",
    "LogFindingMapper",
    "LogRule",
    "Verdict",
    "context",
    "counter_rules",
    "evaluate",
    "findings_from_events",
    "gated_findings",
    "judge",
    "kernel_log_rules",
    "load_log_rules",
    "load_rules",
    "nagios_status",
    "shipped_engine_rules",
    "sxid_catalog",
    "xid_catalog",
]

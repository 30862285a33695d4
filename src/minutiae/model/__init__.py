"""Frozen typed records and the stable vocabulary."""

from minutiae.model.findings import CheckResult, Condition, Finding, LogEvent, Observation
from minutiae.model.vocab import COUNTER_KINDS, EXTRA_KINDS, LOG_KINDS, Action, Severity, Status

__all__ = [
    "COUNTER_KINDS", "EXTRA_KINDS", "LOG_KINDS", "Action", "CheckResult", "Condition", "Finding", "LogEvent",
    "Observation", "Severity", "Status",
]

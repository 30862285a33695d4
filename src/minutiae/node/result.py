"""Turning findings into a check's result (pure; shared by ``run_check`` and the sources)."""

from __future__ import annotations

from collections.abc import Sequence

from minutiae.model import Action, CheckResult, Finding, Severity, Status


def status_of(findings: Sequence[Finding]) -> Status:
    """info → OK, warning → WARNING, error/critical → CRITICAL."""
    worst = max((f.severity for f in findings), default=Severity.INFO)
    if worst >= Severity.ERROR:
        return Status.CRITICAL
    return Status.WARNING if worst == Severity.WARNING else Status.OK


def reason_for(findings: Sequence[Finding]) -> str | None:
    """The distinct messages of the findings with the largest action, worst severity first (at
    most two, then ``(+N more)``); None when no finding needs any action."""
    action = max((f.action for f in findings), default=Action.NONE)
    if action is Action.NONE:
        return None
    worst = sorted((f for f in findings if f.action == action), key=lambda f: (-f.severity, f.kind))
    messages = list(dict.fromkeys(f.message for f in worst))
    more = len(messages) - 2
    return " / ".join(messages[:2]) + (f" (+{more} more)" if more > 0 else "")


def unknown(check: str, reason: str) -> CheckResult:
    """A check whose source could not be read: UNKNOWN with the reason (never OK)."""
    return CheckResult(check, Status.UNKNOWN, (), reason, 0)


def _result(name: str, findings: list[Finding], problems: list[str], observed: int) -> CheckResult:
    """A check's result from its findings; values that could not be read make it UNKNOWN
    (unless a finding is already critical)."""
    status = status_of(findings)
    reason = None
    if problems:
        reason = f"{len(problems)} value(s) unreadable: " + "; ".join(problems[:3])
        if status is not Status.CRITICAL:
            status = Status.UNKNOWN
    return CheckResult(name, status, tuple(findings), reason, observed)


result = _result

__all__ = ["reason_for", "result", "status_of", "unknown"]

"""The notifier seam: the controller calls every ``Notifier`` after each reconcile step with
the decisions worth telling a human (new ones: drains, resumes, escalations, and holds that
changed), plus loud alerts such as a tripped storm breaker.

Implementations (Slack, webhook…) live in ``notify_*.py`` and must not raise: a notifier that
fails logs and returns, so it never stops remediation. ``RecordingNotifier`` is the test fake.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from minutiae.controller.state import Decision


class Notifier(Protocol):
    def notify(self, decisions: Sequence[Decision], alerts: Sequence[str] = ()) -> None:
        """Tell humans about ``decisions`` (and ``alerts``); never raise."""
        ...


@dataclass
class RecordingNotifier:
    """Keeps every call, for tests."""

    calls: list[tuple[tuple[Decision, ...], tuple[str, ...]]] = field(default_factory=list)

    def notify(self, decisions: Sequence[Decision], alerts: Sequence[str] = ()) -> None:
        self.calls.append((tuple(decisions), tuple(alerts)))

    @property
    def decisions(self) -> list[Decision]:
        return [d for ds, _ in self.calls for d in ds]

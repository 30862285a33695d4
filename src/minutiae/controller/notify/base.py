"""The notifier seam: the controller calls every ``Notifier`` after each reconcile step with
the decisions worth telling a human (new ones: drains, resumes, escalations, and holds that
changed), plus loud alerts such as a tripped storm breaker.

Implementations (Slack, webhook…) are one module each in this folder, registered by one line
in ``NOTIFIERS`` (``__init__.py``): the environment variable that turns it on and its
``from_env(url, env, ctx)``. They must not raise: a notifier that fails logs and returns, so it
never stops remediation. ``RecordingNotifier`` is the test fake.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from minutiae.clock import Clock
from minutiae.controller.state import Decision


class Notifier(Protocol):
    def notify(self, decisions: Sequence[Decision], alerts: Sequence[str] = ()) -> None:
        """Tell humans about ``decisions`` (and ``alerts``); never raise."""
        ...


@dataclass(frozen=True, slots=True)
class NotifyContext:
    """What every notifier may need from the controller: its ``clock``, the ``scheduler`` name
    (for undo commands), ``dry_run`` (said in messages), and ``outbox_dir`` (beside the store:
    undelivered messages survive a restart; None keeps them in memory)."""

    clock: Clock
    scheduler: str = "slurm"
    dry_run: bool = False
    outbox_dir: Path | None = None

    def outbox_path(self, name: str) -> Path | None:
        return self.outbox_dir / f"notify-outbox-{name}.json" if self.outbox_dir else None


class NotifierFactory(Protocol):
    """A notifier module's ``from_env``: build it for ``url`` (the variable's value, checked to
    be http(s)); ``env`` holds its other settings (a secret, say)."""

    def __call__(self, url: str, env: Mapping[str, str], ctx: NotifyContext) -> Notifier: ...


@dataclass
class RecordingNotifier:
    """Keeps every call, for tests."""

    calls: list[tuple[tuple[Decision, ...], tuple[str, ...]]] = field(default_factory=list)

    def notify(self, decisions: Sequence[Decision], alerts: Sequence[str] = ()) -> None:
        self.calls.append((tuple(decisions), tuple(alerts)))

    @property
    def decisions(self) -> list[Decision]:
        return [d for ds, _ in self.calls for d in ds]

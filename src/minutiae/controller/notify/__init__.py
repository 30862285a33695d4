"""minutiae.controller.notify: telling humans what the controller decided.

The seam is ``base.Notifier``; ``NOTIFIERS`` has one line per notifier: its name, the
environment variable that turns it on (its value is the URL to post to) and where its
``from_env`` lives (imported only when that variable is set). See README.md to add one.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from minutiae.clock import Clock
from minutiae.controller.notify.base import (
    Notifier,
    NotifierFactory,
    NotifyContext,
    RecordingNotifier,
)
from minutiae.errors import ConfigError


@dataclass(frozen=True, slots=True)
class NotifierEntry:
    """One registry line: ``where`` is ``module:function`` (a :class:`NotifierFactory`)."""

    name: str
    env: str
    where: str

    def load(self) -> NotifierFactory:
        module, _, attr = self.where.partition(":")
        return cast(NotifierFactory, getattr(importlib.import_module(module), attr))


NOTIFIERS: tuple[NotifierEntry, ...] = (
    NotifierEntry("slack", "MINUTIAE_SLACK_WEBHOOK", "minutiae.controller.notify.slack:from_env"),
    NotifierEntry("webhook", "MINUTIAE_WEBHOOK_URL", "minutiae.controller.notify.webhook:from_env"),
)


def notifiers_from_env(env: Mapping[str, str], clock: Clock, *, scheduler: str = "slurm",
                       dry_run: bool = False, outbox_dir: Path | None = None) -> list[Notifier]:
    """The notifiers the environment asks for, in registry order: ``MINUTIAE_SLACK_WEBHOOK``
    (Slack incoming webhook URL) and ``MINUTIAE_WEBHOOK_URL`` (+ ``MINUTIAE_WEBHOOK_SECRET``
    for the HMAC signature). Their outboxes live in ``outbox_dir`` (beside the controller's
    store) when given, so undelivered messages survive a restart."""
    ctx = NotifyContext(clock, scheduler=scheduler, dry_run=dry_run, outbox_dir=outbox_dir)
    out: list[Notifier] = []
    for entry in NOTIFIERS:
        url = env.get(entry.env, "").strip()
        if url:
            _check_url(url, entry.env)
            out.append(entry.load()(url, env, ctx))
    return out


def _check_url(url: str, var: str) -> None:
    if not url.startswith(("https://", "http://")) or any(c.isspace() for c in url):
        raise ConfigError(f"{var}: not an http(s) URL")


__all__ = [
    "NOTIFIERS",
    "Notifier",
    "NotifierEntry",
    "NotifierFactory",
    "NotifyContext",
    "RecordingNotifier",
    "notifiers_from_env",
]

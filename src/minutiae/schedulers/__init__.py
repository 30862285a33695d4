"""minutiae.schedulers: the scheduler seam (``base``), its registry (here) and the backends.

``BACKENDS`` has one line per backend: its name (``minutiae serve --backend``), the class that
builds it (imported only when made or asked for an undo hint) and the optional capabilities it
declares. ``make_backend`` builds one and checks the declaration; ``undo_hint`` gives the
command that reverses a drain/resume on a named scheduler. See README.md to add a backend.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from functools import cache
from typing import Any, cast

from minutiae.errors import BackendError, ConfigError
from minutiae.schedulers.base import (
    CAPABILITIES,
    MAX_REASON_LEN,
    NOTHING_TO_UNDO,
    REASON_PREFIX,
    BackendClass,
    BackendOptions,
    BulkStates,
    Capabilities,
    JobTolerances,
    ListsNodes,
    NodeSchedState,
    NodeState,
    SchedulerBackend,
    UndoVerb,
    capabilities_of,
    make_reason,
    validate_node,
)


@dataclass(frozen=True, slots=True)
class Backend:
    """One registry line: ``where`` is ``module:Class``; ``serve`` is false for the test fake
    (not offered by ``minutiae serve``)."""

    name: str
    where: str
    capabilities: frozenset[type]
    serve: bool = True

    def load(self) -> BackendClass:
        return _load(self.where)


def _caps(*caps: type) -> frozenset[type]:
    return frozenset(caps)


_ALL = (BulkStates, ListsNodes, JobTolerances)

BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("dry-run", "minutiae.schedulers.dryrun:DryRunBackend", _caps(BulkStates)),
    Backend("slurm", "minutiae.schedulers.slurm.backend:SlurmBackend", _caps(*_ALL)),
    Backend("kubernetes", "minutiae.schedulers.kubernetes.backend:KubernetesBackend",
            _caps(BulkStates)),
    Backend("recording", "minutiae.schedulers.recording:RecordingBackend", _caps(ListsNodes),
            serve=False),
)}


@cache
def _load(where: str) -> BackendClass:
    module, _, attr = where.partition(":")
    return cast(BackendClass, getattr(importlib.import_module(module), attr))


def serve_backends() -> tuple[str, ...]:
    """The names ``minutiae serve --backend`` offers (registry order)."""
    return tuple(n for n, b in BACKENDS.items() if b.serve)


def make_backend(name: str, **opts: Any) -> SchedulerBackend:
    """Build backend ``name`` with ``opts`` (the fields of :class:`BackendOptions`); its
    declared capabilities are checked here, once."""
    entry = BACKENDS.get(name)
    if entry is None:
        raise ConfigError(f"--backend: unknown backend {name!r} "
                          f"(one of: {', '.join(serve_backends())})")
    known = {f.name for f in fields(BackendOptions)}
    if set(opts) - known:
        raise ConfigError(f"backend {name}: unknown option(s) {', '.join(sorted(set(opts) - known))}")
    be = entry.load().create(BackendOptions(**opts))
    missing = entry.capabilities - capabilities_of(be)
    if missing:
        raise BackendError(f"backend {name}: declared but missing "
                           f"{', '.join(sorted(c.__name__ for c in missing))}")
    return be


def undo_hint(scheduler: str, verb: UndoVerb, node: str, reason: str = "") -> str:
    """The command that reverses ``verb`` on ``node`` with ``scheduler``'s own tools (an
    unknown name, like dry-run, touched nothing)."""
    entry = BACKENDS.get(scheduler)
    if entry is None:
        return NOTHING_TO_UNDO
    return entry.load().undo_hint(verb, node, reason)


__all__ = [
    "BACKENDS",
    "CAPABILITIES",
    "MAX_REASON_LEN",
    "NOTHING_TO_UNDO",
    "REASON_PREFIX",
    "Backend",
    "BackendClass",
    "BackendOptions",
    "BulkStates",
    "Capabilities",
    "JobTolerances",
    "ListsNodes",
    "NodeSchedState",
    "NodeState",
    "SchedulerBackend",
    "UndoVerb",
    "capabilities_of",
    "make_backend",
    "make_reason",
    "serve_backends",
    "undo_hint",
    "validate_node",
]

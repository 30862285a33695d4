"""The public surface of ``minutiae.schedulers`` is pinned (httpx's tests/test_exported_members.py
style): ``__all__`` lists exactly the public names the package binds, and they are these."""

from __future__ import annotations

import types

import click

import minutiae.schedulers as schedulers

PINNED = {
    "BACKENDS", "CAPABILITIES", "MAX_REASON_LEN", "NOTHING_TO_UNDO", "REASON_PREFIX",
    "Backend", "BackendClass", "BackendOptions", "BulkStates", "Capabilities",
    "JobTolerances", "ListsNodes", "NodeSchedState", "NodeState", "SchedulerBackend",
    "UndoVerb", "capabilities_of", "make_backend", "make_reason", "serve_backends",
    "undo_hint", "validate_node",
}


def test_all_is_pinned_and_complete() -> None:
    public = {n for n, v in vars(schedulers).items()
              if not n.startswith("_") and not isinstance(v, types.ModuleType)
              and n not in {"annotations", "Any", "cast", "cache", "dataclass", "fields",
                            "importlib", "BackendError", "ConfigError"}}
    assert set(schedulers.__all__) == PINNED
    assert public == PINNED
    assert len(schedulers.__all__) == len(PINNED)  # no duplicates


def test_serve_offers_the_registered_backends() -> None:
    from minutiae.cli.serve import command

    [opt] = [p for p in command.params if p.name == "backend"]
    assert isinstance(opt.type, click.Choice)
    assert tuple(opt.type.choices) == schedulers.serve_backends()
    assert {"dry-run", "slurm", "kubernetes"} <= set(opt.type.choices)
    assert "recording" in schedulers.BACKENDS  # the fake is registered, not served

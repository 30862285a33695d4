"""The public surfaces are pinned: each has ``__all__``, and it lists exactly its public names."""

from __future__ import annotations

import importlib
import inspect

import pytest

PUBLIC = ["minutiae.node", "minutiae.rules", "minutiae.schedulers", "minutiae.timing"]


def _defined_in_package(value: object, package: str) -> bool:
    """Classes and functions count when the package defines them (its helpers imported from the
    standard library or minutiae.errors are not its surface); constants always count."""
    if not (inspect.isclass(value) or inspect.isfunction(value)):
        return getattr(value, "__module__", package).startswith(package) or not callable(value)
    return value.__module__.startswith(package)


@pytest.mark.parametrize("name", PUBLIC)
def test_all_lists_exactly_the_public_names(name: str) -> None:
    pkg = importlib.import_module(name)
    assert isinstance(pkg.__all__, list | tuple), f"{name} has no __all__"
    public = {n for n, v in vars(pkg).items()
              if not n.startswith("_") and not inspect.ismodule(v) and n != "annotations"
              and _defined_in_package(v, name)}
    assert public <= set(pkg.__all__), "defined here but not exported"
    assert all(hasattr(pkg, n) and not n.startswith("_") for n in pkg.__all__)
    assert len(pkg.__all__) == len(set(pkg.__all__))


def test_the_documented_timer_path_keeps_working() -> None:
    from minutiae.timing import StepTimer
    assert "StepTimer" in importlib.import_module("minutiae.timing").__all__
    assert callable(StepTimer)

"""The public surface of minutiae.rules is pinned: ``__all__`` is exactly the public names the
package defines (like httpx tests/test_exported_members.py), and each of them resolves."""

from __future__ import annotations

import types

import minutiae.rules as pkg


def test_all_is_the_public_names() -> None:
    public = sorted(name for name, value in vars(pkg).items()
                    if not name.startswith("_") and not isinstance(value, types.ModuleType))
    assert sorted(pkg.__all__) == public


def test_every_export_resolves() -> None:
    assert all(getattr(pkg, name, None) is not None for name in pkg.__all__)

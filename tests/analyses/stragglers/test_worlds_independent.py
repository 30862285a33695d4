"""The benchmark's job generator (bench/stragglers/worlds.py) shares no code with minutiae: the
detector is measured on structure it was not written around (issue 13)."""

from __future__ import annotations

import ast
from pathlib import Path

WORLDS = Path(__file__).resolve().parents[3] / "bench" / "stragglers" / "worlds.py"


def test_worlds_imports_nothing_of_minutiae() -> None:
    tree = ast.parse(WORLDS.read_text())
    mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert mods, "no import found: the check is not looking at the generator"
    assert {m.split(".")[0] for m in mods} <= {"__future__", "dataclasses", "numpy", "polars"}

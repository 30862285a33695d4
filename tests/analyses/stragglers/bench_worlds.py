"""The bench modules the straggler tests run the detector on, loaded once: the independent job
generator ``bench/stragglers/worlds.py`` (numpy only, no minutiae code) and the real-noise jobs
of ``bench/stragglers/realnoise.py`` (an H200's measured step times)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["load_bench", "worlds"]

_BENCH = Path(__file__).resolve().parents[3] / "bench" / "stragglers"


def load_bench(name: str) -> ModuleType:
    """``bench/stragglers/<name>.py`` as module ``name`` (once)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


worlds = load_bench("worlds")

"""The independent job generator ``bench/stragglers/worlds.py`` (numpy only, no minutiae code),
loaded once for the tests that run the detector on its jobs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = ["worlds"]

_PATH = Path(__file__).resolve().parents[3] / "bench" / "stragglers" / "worlds.py"
_SPEC = importlib.util.spec_from_file_location("worlds", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
worlds = importlib.util.module_from_spec(_SPEC)
sys.modules["worlds"] = worlds
_SPEC.loader.exec_module(worlds)

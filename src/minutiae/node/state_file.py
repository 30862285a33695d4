"""The check engine's state file (:class:`minutiae.rules.engine.state.EngineState` as JSON), so
that one-shot runs (Slurm HealthCheckProgram every few minutes) keep rates, counts, persistence
timers and flap history.

Written atomically (temporary file in the same directory, fsync, rename), so a run killed half
way leaves the previous state. A missing file is a fresh state; a corrupt or unreadable one is a
fresh state plus a warning naming the path (never a crash: losing history only delays alarms).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from minutiae.errors import DataError, InputError
from minutiae.rules.engine.state import EngineState

#: refuse to read a state file bigger than this (a damaged or foreign file)
MAX_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class LoadedState:
    """The state read from disk, and why it was discarded (``warning``) if it was."""

    state: EngineState
    warning: str | None = None


def load_engine_state(path: Path) -> LoadedState:
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            return LoadedState(EngineState(), f"{path}: state file too large ({size} bytes); starting afresh")
        data = path.read_bytes()
    except FileNotFoundError:
        return LoadedState(EngineState())
    except OSError as exc:
        return LoadedState(EngineState(), f"{path}: cannot read state file ({exc.strerror or exc}); starting afresh")
    try:
        return LoadedState(EngineState.from_json(data))
    except DataError as exc:
        return LoadedState(EngineState(), f"{path}: corrupt state file ({exc}); starting afresh")


def save_engine_state(path: Path, state: EngineState) -> None:
    """Write atomically; raises ``InputError`` naming the path when it cannot be written."""
    text = state.to_json()
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise InputError(f"cannot write state file: {exc.strerror or exc}", str(path)) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

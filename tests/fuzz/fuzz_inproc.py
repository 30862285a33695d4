"""In-process runner for the fuzz suite: ``minutiae.cli.main.main(argv)`` as the console script
runs it, with a CPU-time alarm (ITIMER_PROF: a loaded machine stretches wall time, not the CPU a
loop burns) and a wall-clock backstop for a blocked read. ``serve`` never binds: ``uvicorn.run``
is replaced for the call (its arguments, the HTTP limits from the environment, are still
evaluated), so every option of ``serve`` is parsed and checked without a server running."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

HANG_S = 20          # CPU seconds one case may burn
HANG_WALL_S = 300    # wall seconds one case may take (blocked, not burning CPU)


class Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang


@dataclass(frozen=True)
class Outcome:
    """How one case ended: ``problem`` is None when it ended well."""
    rc: int | None
    err: str
    problem: str | None
    kind: str = "ok"    # ok | traceback | hang | bad_exit | shell


@contextmanager
def alarms() -> Iterator[None]:
    old = signal.signal(signal.SIGALRM, _alarm), signal.signal(signal.SIGPROF, _alarm)
    try:
        yield
    finally:
        signal.signal(signal.SIGALRM, old[0])
        signal.signal(signal.SIGPROF, old[1])


@contextmanager
def no_server() -> Iterator[None]:
    import uvicorn

    run, switch = uvicorn.run, sys.getswitchinterval()

    def fake(app: Any, **kw: Any) -> None:
        return None

    uvicorn.run = fake  # type: ignore[assignment]
    try:
        yield
    finally:
        uvicorn.run = run  # type: ignore[assignment]
        sys.setswitchinterval(switch)


def run_case(argv: list[str], read_err: Any, cwd: Path, exits: tuple[int, ...] = (0, 1, 3)
             ) -> Outcome:
    """One command under the alarms (call inside :func:`alarms`); ``read_err()`` returns the
    stderr captured since the last call (pytest's capsys). A file ``pwned*`` in ``cwd``
    afterwards means a value reached a shell."""
    from minutiae.cli.main import main

    signal.setitimer(signal.ITIMER_PROF, HANG_S)
    signal.setitimer(signal.ITIMER_REAL, HANG_WALL_S)
    try:
        with no_server():
            rc = main(argv)
    except Hang:
        return Outcome(None, "", f"hung > {HANG_S} CPU s or {HANG_WALL_S} s", "hang")
    except SystemExit as exc:   # click's own exits
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - counting what escaped is the test
        return Outcome(None, "", f"{type(exc).__name__}: {exc}"[:300], "traceback")
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
    err = read_err()
    if any(cwd.glob("pwned*")):
        return Outcome(rc, err, "a value reached a shell", "shell")
    errors = [ln for ln in err.splitlines() if ln.startswith("minutiae: error")]
    if rc not in exits or len(errors) > 1 or "Traceback" in err:
        return Outcome(rc, err, f"exit {rc}: {err.strip()[-300:]}", "bad_exit")
    return Outcome(rc, err, None)


def fake_scontrol(d: Path) -> str:
    """A ``PATH`` whose ``scontrol`` fails at once (a real one without slurmctld waits for its
    timeout): the values still reach its command line, and a shell would still run ``$(…)``."""
    b = d / "fakebin"
    b.mkdir(exist_ok=True)
    s = b / "scontrol"
    s.write_text("#!/bin/sh\necho 'scontrol: error: no controller (fuzz)' >&2\nexit 1\n")
    s.chmod(0o755)
    import os

    return f"{b}{os.pathsep}{os.environ.get('PATH', '')}"

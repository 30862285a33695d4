"""A rich progress bar for the simulator's phases (nodes, then jobs); silent when quiet."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)


@contextmanager
def progress_bar(quiet: bool = False) -> Iterator[Callable[[str, int, int], None] | None]:
    if quiet:
        yield None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=False) as prog:
        tasks: dict[str, TaskID] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = prog.add_task(f"simulating {phase}", total=total)
            prog.update(tasks[phase], completed=done)

        yield update

"""The kernel-log source: ``kmsg`` (a file, or ``/dev/kmsg``) through the kernel-log rules and
the log-count engine rules, reading only what is new since the previous cycle.

Kernel-log findings last since boot: the lines after ``memory.log_cursor`` are parsed and merged
into ``memory.log_findings`` (which this updates); the log-count engine rules (``log_counts.toml``:
repeats within a window, flapping links) run over the new findings with their state kept in
``memory.engine``. This source judges its own data, so it hands back a finished result."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from minutiae.clock import Clock
from minutiae.errors import MinutiaeError, SourceUnavailable
from minutiae.model import CheckResult, Finding
from minutiae.node.memory import CheckMemory
from minutiae.node.result import status_of, unknown
from minutiae.node.sources.base import Kind, Option, Reading, Request, Source

GROUP = "kernel_log"


def _read(req: Request) -> Reading | None:
    if req.cfg.kmsg is None:
        return None
    return Reading(result=check_kernel_log(req.cfg.kmsg, req.cfg.year, req.memory, req.clock,
                                           req.node, req.cache_dir))


class _LineCount:
    """Counts the lines of the chunks passing through (the file is read once, as parsed)."""

    def __init__(self) -> None:
        self.n = 0

    def through(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self.n += chunk.count(b"\n")
            yield chunk


def check_kernel_log(path: Path, year: int | None, memory: CheckMemory, clock: Clock,
                     node: str, cache_dir: Path | None = None) -> CheckResult:
    """Kernel-log findings since boot (see the module docstring)."""
    from minutiae.node.sources.kernel_log.read_kmsg import read_kernel_log

    try:
        chunks, cursor, reset = read_kernel_log(path, memory.log_cursor)
    except SourceUnavailable as exc:
        return unknown(GROUP, exc.reason)
    if reset:
        memory.reset_log()
    new: list[Finding] = []
    if chunks:  # the parser and its catalogs are loaded only when there is something new
        try:
            from minutiae.node.sources.kernel_log.parse import parse_chunks
            from minutiae.rules.log_findings import findings_from_events
        except ImportError as exc:  # the kernel-log rules are not installed in this build
            return unknown(GROUP, f"kernel-log rules unavailable ({exc})")
        lines = _LineCount()
        try:  # streamed: a file is read as it is parsed
            new = list(findings_from_events(parse_chunks(lines.through(chunks), year=year)))
        except MinutiaeError as exc:
            return unknown(GROUP, str(exc))
        memory.add_log_findings(new)
        memory.log_events += lines.n  # lines scanned since boot
    memory.log_cursor = cursor
    counted: tuple[Finding, ...] = ()
    if new or memory.engine:
        try:
            counted = _log_counts(new, memory, clock, node, cache_dir)
        except MinutiaeError as exc:
            return unknown(GROUP, f"log-count rules: {exc}")
    findings = tuple(memory.log_findings) + counted
    return CheckResult(GROUP, status_of(findings), findings, None, memory.log_events)


def _log_counts(new: Sequence[Finding], memory: CheckMemory, clock: Clock, node: str,
                cache_dir: Path | None = None) -> tuple[Finding, ...]:
    from minutiae.rules.engine.engine import Engine
    from minutiae.rules.engine.rules import shipped_engine_rules
    from minutiae.rules.engine.state import EngineState

    state = None
    if memory.engine:
        try:
            state = EngineState.from_json(memory.engine)
        except MinutiaeError:
            state = None  # damaged: counts start again
    rules = [r for r in shipped_engine_rules(cache_dir) if r.on == "finding"]
    engine = Engine(rules, clock=clock, node=node, state=state)
    engine.record(new)
    result = engine.evaluate()
    memory.engine = engine.state.to_json() if any(engine.state.rules.values()) else None
    return result.findings


KMSG = Source("kmsg", GROUP, _read, options=(
    Option("--kmsg", "kmsg", Kind.PATH,
           check={"help": "Kernel log file to scan (default /dev/kmsg on this node)."},
           agent={"default": "/dev/kmsg", "show_default": True, "help": "kernel log ('' to skip)"}),
    Option("--year", "year", Kind.INT, agent=None,
           check={"help": "Year for kernel-log timestamps without one."}),
))

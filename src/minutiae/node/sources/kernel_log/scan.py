"""Kernel-log bytes (as a source streams them) → findings: the parser, then the rules and the
XID/SXID catalogs (pure; what ``minutiae logscan`` runs).

:func:`scan_chunks` yields every finding (``--json``, ``check``, the agent);
:func:`scan_groups` folds them into an :class:`~minutiae.rules.log_findings.Aggregator` (the
default table, ``--summary``, ``--aggregate``) and builds no event and no finding for a message
it has seen before whose findings differ only in line, time and place
(:mod:`~minutiae.node.sources.kernel_log.repeats`): a fleet log that repeats one benign line
80,000 times costs a dict lookup, a time and a count per repeat."""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from minutiae.model.findings import Finding
from minutiae.model.vocab import Severity
from minutiae.node.sources.kernel_log.parse import KernelLogParser
from minutiae.node.sources.kernel_log.repeats import RepeatCounter
from minutiae.rules.log_findings import Aggregator, LogFindingMapper, findings_from_events
from minutiae.rules.logs import LogRule

__all__ = ["scan_chunks", "scan_groups"]


def scan_chunks(chunks: Iterable[bytes], *, year: int | None = None,
                rules: Sequence[LogRule] | None = None) -> Iterator[Finding]:
    """Kernel-log bytes (as a source streams them) → findings: parser, then rules/catalogs."""
    parser = KernelLogParser(rules, year=year)
    return findings_from_events(parser.parse_chunks(chunks), rules=parser.rules)


def scan_groups(chunks: Iterable[bytes], *, year: int | None = None,
                rules: Sequence[LogRule] | None = None, floor: Severity = Severity.INFO,
                into: Aggregator | None = None) -> Aggregator:
    """Kernel-log bytes → their findings of severity ``floor`` or more, grouped (``into``, or
    a new :class:`Aggregator`): the same groups and counts as adding every finding of
    :func:`scan_chunks` to it."""
    agg = Aggregator() if into is None else into
    parser = KernelLogParser(rules, year=year)
    mapper = LogFindingMapper(parser.rules)
    parser.repeats = repeats = RepeatCounter(
        parser.match_single, lambda memo: mapper.counted(memo[4]),
        lambda memo, t: mapper.line_plan(*memo, t), agg.add_plan, year=year, floor=floor,
        tally=agg.add_tally)
    finding, add = mapper.finding, agg.add
    try:
        with _collector_paused():
            for ev in parser.parse_chunks(chunks):
                f = finding(ev)
                if f.severity >= floor:
                    add(f)
            repeats.flush()
    finally:
        parser.repeats = None  # the parser and its counter refer to each other: freed now
    return agg


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for a grouped scan (restored after). The scan
    makes no reference cycles (tested: nothing is left for a collection to find), but the
    plans, tallies and memos it keeps are container objects whose allocations trigger
    collections that traverse them: ~4 % of a dense log's scan."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

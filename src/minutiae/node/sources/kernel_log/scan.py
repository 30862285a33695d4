"""Kernel-log bytes (as a source streams them) → findings: the parser, then the rules and the
XID/SXID catalogs (pure; what ``minutiae logscan`` runs)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from minutiae.model.findings import Finding
from minutiae.node.sources.kernel_log.parse import KernelLogParser
from minutiae.rules.log_findings import findings_from_events
from minutiae.rules.logs import LogRule


def scan_chunks(chunks: Iterable[bytes], *, year: int | None = None,
                rules: Sequence[LogRule] | None = None) -> Iterator[Finding]:
    """Kernel-log bytes (as a source streams them) → findings: parser, then rules/catalogs."""
    parser = KernelLogParser(rules, year=year)
    return findings_from_events(parser.parse_chunks(chunks), rules=parser.rules)

"""Evidence: the line ``explain`` shows for a finding, the fingerprint that identifies it, and
acknowledgement (``minutiae resolve``, or an admin's resume of our drain): acknowledged
fingerprints no longer drain the node; the same fault again is a new line, so new evidence.
"""

from __future__ import annotations

from dataclasses import replace

from minutiae.controller.state import NodeMemory, Report
from minutiae.model import Finding


def evidence_line(f: Finding) -> str:
    head = f.kind if f.code is None else f"{f.kind} {f.code}"
    where = f" {f.component or f.pci}" if (f.component or f.pci) else ""
    return f"[{f.severity.label}/{f.action.label}] {head}{where}: {f.line or f.message}"


def fingerprint(f: Finding) -> str:
    """What identifies one piece of evidence: a kernel-log line (with its timestamp) or a
    counter's message. The same fault again is a new line, so a new fingerprint."""
    when = f.time.isoformat() if f.time is not None else ""
    return f"{f.kind}|{f.code}|{f.component or f.pci or ''}|{f.line or f.message}|{when}"


_MAX_ACKED = 256


def acknowledge(m: NodeMemory, report: Report | None) -> tuple[NodeMemory, tuple[str, ...]]:
    """``m`` with every finding of ``report`` acknowledged (bounded: the fingerprints still in
    the report first); returns the evidence lines newly acknowledged."""
    found = report.findings if report is not None else ()
    prints = {fingerprint(f): f for f in found}
    new = tuple(evidence_line(f) for p, f in prints.items() if p not in m.acked)
    keep = set(prints) | set(sorted(m.acked - set(prints))[: max(0, _MAX_ACKED - len(prints))])
    return replace(m, acked=frozenset(sorted(keep)[:_MAX_ACKED])), new

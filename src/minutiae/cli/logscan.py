"""``minutiae logscan [FILE ...|-] [--json]``: kernel-log faults as a table or JSON lines.

Wiring only: source (:mod:`minutiae.node.sources.kernel_log.read_stream`) → parser + rules
(:func:`minutiae.node.sources.kernel_log.scan.scan_chunks`) → output. Exit code: Nagios by the worst finding
(0 none/info, 1 warning, 2 error/critical); a file that cannot be read → message naming it, 3.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from minutiae.errors import InputError
from minutiae.inputs import BINARY_PROBE, MAX_NO_NEWLINE
from minutiae.model.vocab import Severity, Status
from minutiae.rules.log_findings import Aggregator, FindingGroup

_SEV_STYLE = {"info": "dim", "warning": "yellow", "error": "red", "critical": "bold red"}


def _console() -> Any:
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 250)


def _footer(console: Any, agg: Aggregator) -> None:
    summary = ", ".join(f"{n} {s.label}" for s, n in sorted(agg.by_severity.items()) if n)
    console.print(f"{agg.total} findings ({summary}); the node needs: {agg.worst_action.label}")
    if agg.overflow:
        console.print(f"({agg.overflow} findings of more than {agg.max_groups} distinct groups "
                      "are counted, not listed)")


def _table(groups: list[FindingGroup], agg: Aggregator, sources: list[str]) -> None:
    """One row per (kind, code, device, rule): count, first and last seen, one example line."""
    from rich.table import Table
    from rich.text import Text

    console = _console()
    if not groups:
        console.print(f"no kernel-log faults in {', '.join(sources)}")
        return
    table = Table(show_lines=False, header_style="bold")
    widths = {"count": 5, "kind": 14, "GPU/PCI": 12, "code": 30, "severity": 8, "action": 11,
              "first": 19, "last": 19, "line": 6, "example": 40}
    for col, width in widths.items():
        table.add_column(col, overflow="ellipsis", no_wrap=True, min_width=width,
                         max_width=110 if col == "example" else 40)
    for g in groups:
        code = "" if g.code is None else f"{g.code} {g.name or ''}".strip()
        table.add_row(str(g.count), g.kind, g.pci or "", code,
                      Text(g.severity.label, style=_SEV_STYLE[g.severity.label]), g.action.label,
                      _stamp(g.first), _stamp(g.last), str(g.first_line_no or ""),
                      Text((g.example or "")[:300]))
    console.print(table)
    _footer(console, agg)


def _stamp(t: datetime | None) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S") if t else ""


def _summary_table(groups: list[FindingGroup], agg: Aggregator, sources: list[str]) -> None:
    from rich.table import Table
    from rich.text import Text

    console = _console()
    if not groups:
        console.print(f"no kernel-log faults in {', '.join(sources)}")
        return
    table = Table(header_style="bold")
    for col in ("count", "kind", "GPU/PCI", "code", "severity", "action", "first", "last",
                "message"):
        table.add_column(col, no_wrap=True, overflow="ellipsis",
                         max_width=90 if col == "message" else 40)
    for g in groups:
        code = "" if g.code is None else f"{g.code} {g.name or ''}".strip()
        table.add_row(str(g.count), g.kind, g.pci or "", code,
                      Text(g.severity.label, style=_SEV_STYLE[g.severity.label]), g.action.label,
                      _stamp(g.first), _stamp(g.last), Text(g.message))
    console.print(table)
    _footer(console, agg)


@click.command("logscan")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=True, allow_dash=True, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per finding (streamed).")
@click.option("--aggregate", is_flag=True,
              help="With --json: one object per (kind, code, device, rule) group instead.")
@click.option("--year", type=click.IntRange(1970, 9999), default=None,
              help="Year for timestamps without one (syslog); default: this year.")
@click.option("--summary", is_flag=True,
              help="Compact table: one row per group with count, first/last and message.")
@click.option("--min-severity", type=click.Choice(["info", "warning", "error", "critical"]),
              default="info", show_default=True, help="Leave out findings below this severity.")
@click.option("--rules", "rules_file", type=click.Path(path_type=Path), default=None,
              help="Site kernel-log rules (TOML, docs/rules.md), added to the shipped ones.")
def command(files: tuple[str, ...], as_json: bool, aggregate: bool, summary: bool,
            year: int | None, min_severity: str, rules_file: Path | None) -> int:
    """Find hardware/driver faults in kernel logs (dmesg, dmesg -T, ISO, journalctl, syslog,
    /dev/kmsg). FILE may be '-' for standard input; without FILE, standard input when piped,
    else this node's /dev/kmsg."""
    from minutiae.clock import SystemClock
    from minutiae.node.sources.kernel_log.read_stream import DEV_KMSG, STDIN
    from minutiae.node.sources.kernel_log.scan import scan_chunks, scan_groups
    from minutiae.rules.logs import kernel_log_rules, load_log_rules

    if year is None:
        year = datetime.fromtimestamp(SystemClock().now(), UTC).year
    rules = kernel_log_rules()
    if rules_file is not None:
        rules = rules + load_log_rules(rules_file)
    sources = list(files) or [STDIN if not sys.stdin.isatty() else str(DEV_KMSG)]
    floor = Severity[min_severity.upper()]
    stream = as_json and not (summary or aggregate)
    agg = Aggregator()
    echo = click.echo
    for src in sources:
        if not stream:  # grouped: repeated messages are counted, no finding is built for them
            scan_groups(_guarded(src), year=year, rules=rules, floor=floor, into=agg)
            continue
        for f in scan_chunks(_guarded(src), year=year, rules=rules):
            if f.severity < floor:
                continue
            if len(sources) > 1:
                f = replace(f, attrs={**f.attrs, "file": src})
            echo(json.dumps(f.to_json(), ensure_ascii=False))
            agg.add(f)
    groups = [] if stream else agg.groups()
    if as_json and not stream:
        for g in groups:
            echo(json.dumps(g.to_json(), ensure_ascii=False))
    elif summary:
        _summary_table(groups, agg, sources)
    elif not as_json:
        _table(groups, agg, sources)
    return int(_status(agg.worst))


def _status(worst: Severity) -> Status:
    if worst >= Severity.ERROR:
        return Status.CRITICAL
    return Status.WARNING if worst is Severity.WARNING else Status.OK


def _guarded(src: str) -> Iterator[bytes]:
    """The source's chunks, refused with one line (exit 3) when they are not a text log: NUL
    bytes with no line end in the first 64 KiB (``/dev/zero``, a binary file), or more than
    :data:`MAX_NO_NEWLINE` bytes without one (an endless stream); the parser caps line length,
    so memory stays bounded either way. NULs inside a log (a crash-truncated kern.log) are fine."""
    from minutiae.node.sources.kernel_log.read_stream import DEV_KMSG, STDIN, iter_kernel_log

    name = "<stdin>" if src == STDIN else src
    if src != STDIN and Path(src) != DEV_KMSG:
        try:
            mode = os.stat(src).st_mode
        except OSError:
            mode = 0  # the reader names the path and the reason
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise InputError("a device is not a kernel log (only /dev/kmsg is read)", name)
    first, since_nl = True, 0
    for chunk in iter_kernel_log(src):
        if first and chunk:
            first = False
            head = chunk[:BINARY_PROBE]
            if b"\0" in head and b"\n" not in head:
                raise InputError("binary data (NUL bytes, no line ends), not a kernel log", name)
        nl = chunk.rfind(b"\n")
        since_nl = since_nl + len(chunk) if nl < 0 else len(chunk) - nl - 1
        if since_nl > MAX_NO_NEWLINE:
            raise InputError(f"no line end in {MAX_NO_NEWLINE >> 20} MiB: not a text log", name)
        yield chunk

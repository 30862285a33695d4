"""``minutiae logscan [FILE ...|-] [--json]``: kernel-log faults as a table or JSON lines.

Wiring only: source (:mod:`minutiae.node.sources.kernel_log.read_stream`) → parser + rules
(:func:`minutiae.node.sources.kernel_log.scan.scan_chunks`) → output. Exit code: Nagios by the worst finding
(0 none/info, 1 warning, 2 error/critical); a file that cannot be read → message naming it, 3.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from minutiae.model.findings import Finding

if TYPE_CHECKING:
    from minutiae.rules.log_findings import FindingGroup

_SEV_STYLE = {"info": "dim", "warning": "yellow", "error": "red", "critical": "bold red"}


def _when(f: Finding) -> str:
    if f.time is not None:
        return f.time.strftime("%Y-%m-%d %H:%M:%S")
    up = f.attrs.get("uptime_s")
    return f"[{up:.3f}]" if isinstance(up, int | float) else ""


def _code(f: Finding) -> str:
    if f.code is None:
        return ""
    name = f.attrs.get("name")
    return f"{f.code} {name}" if name else str(f.code)


def _table(findings: list[Finding], sources: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=None if sys.stdout.isatty() else 250)
    if not findings:
        console.print(f"no kernel-log faults in {', '.join(sources)}")
        return
    table = Table(show_lines=False, header_style="bold")
    widths = {"time": 19, "kind": 12, "GPU/PCI": 12, "code": 14, "severity": 8, "action": 11,
              "line": 6, "evidence": 40}
    for col, width in widths.items():
        table.add_column(col, overflow="ellipsis", no_wrap=True, min_width=width,
                         max_width=110 if col == "evidence" else 40)
    for f in findings:
        where = str(f.line_no)
        if len(sources) > 1:
            where = f"{Path(str(f.attrs.get('file', ''))).name}:{f.line_no}"
        table.add_row(_when(f), f.kind, f.pci or "", _code(f),
                      Text(f.severity.label, style=_SEV_STYLE[f.severity.label]), f.action.label,
                      where, Text((f.line or "").splitlines()[0][:300]))
    console.print(table)
    worst_action = max(f.action for f in findings)
    counts = {s: sum(f.severity.label == s for f in findings) for s in _SEV_STYLE}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    console.print(f"{len(findings)} findings ({summary}); the node needs: {worst_action.label}")


def _summary_table(groups: list[FindingGroup], sources: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=None if sys.stdout.isatty() else 250)
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
                      g.first.strftime("%Y-%m-%d %H:%M:%S") if g.first else "",
                      g.last.strftime("%Y-%m-%d %H:%M:%S") if g.last else "", Text(g.message))
    console.print(table)


@click.command("logscan")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=True, allow_dash=True, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per finding.")
@click.option("--year", type=click.IntRange(1970, 9999), default=None,
              help="Year for timestamps without one (syslog); default: this year.")
@click.option("--summary", is_flag=True,
              help="One row (or JSON object) per kind/code/GPU with a count, worst first.")
@click.option("--rules", "rules_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Extra kernel-log rules (TOML, schema in docs/rules.md).")
def command(files: tuple[str, ...], as_json: bool, summary: bool, year: int | None,
            rules_file: Path | None) -> int:
    """Find hardware/driver faults in kernel logs (dmesg, dmesg -T, ISO, journalctl, syslog,
    /dev/kmsg). FILE may be '-' for standard input; without FILE, standard input when piped,
    else this node's /dev/kmsg."""
    from minutiae.clock import SystemClock
    from minutiae.node.sources.kernel_log.read_stream import DEV_KMSG, STDIN, iter_kernel_log
    from minutiae.node.sources.kernel_log.scan import scan_chunks
    from minutiae.rules.log_findings import nagios_status, summarize
    from minutiae.rules.logs import kernel_log_rules, load_log_rules

    if year is None:
        year = datetime.fromtimestamp(SystemClock().now(), UTC).year
    rules = kernel_log_rules()
    if rules_file is not None:
        rules = rules + load_log_rules(rules_file)
    sources = list(files) or [STDIN if not sys.stdin.isatty() else str(DEV_KMSG)]
    findings: list[Finding] = []
    for src in sources:
        for f in scan_chunks(iter_kernel_log(src), year=year, rules=rules):
            if len(sources) > 1:
                f = replace(f, attrs={**f.attrs, "file": src})
            if as_json and not summary:
                click.echo(json.dumps(f.to_json(), ensure_ascii=False))
            findings.append(f)
    if summary:
        groups = summarize(findings)
        if as_json:
            for g in groups:
                click.echo(json.dumps(g.to_json(), ensure_ascii=False))
        else:
            _summary_table(groups, sources)
    elif not as_json:
        _table(findings, sources)
    return int(nagios_status(findings))

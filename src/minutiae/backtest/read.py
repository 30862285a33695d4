"""Reads the files of a history directory for ``minutiae backtest`` (the only I/O of the
backtest; the root is a parameter). Two layouts:

- a simulated dataset (docs/dataset.md): ``meta.json``, ``fleet.csv``, ``nodes/<node>/kern.log``,
  ``nodes/<node>/ib.csv``, ``maintenance.csv``, ``jobs.csv``, ``truth.jsonl``;
- a recorded controller history: ``reports.jsonl`` (one agent report per line, the JSON the
  agent posts to ``/v1/reports``, with its receive time as ``time`` when the agent gave none),
  optionally ``fleet.csv``, ``maintenance.csv`` and ``jobs.csv`` beside it.

Missing optional files are empty; unreadable or malformed ones raise ``InputError`` naming the path.
A simulated dataset's files are also checked for damage (:mod:`minutiae.scoring.damage`): a row
cut short or garbled, a missing node folder or file, counters ending long before the dataset's
end. The damage is returned beside the good part, never hidden: the replay makes it UNKNOWN.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minutiae.errors import InputError, ParseError
from minutiae.inputs import iter_lines, read_bounded
from minutiae.node.replay import parse_csv
from minutiae.scoring.damage import Damage, Harm, check_csv_lines, last_line_time

SIMULATED = "simulated"
RECORDED = "recorded"
#: the largest history file read whole (a kernel log, a CSV, reports.jsonl)
MAX_FILE = 1 << 31
#: a CSV or log line is cut at this many bytes (the rest is counted, not kept)
MAX_LINE = 1 << 16


def layout(root: Path) -> str:
    """Which history ``root`` holds (``simulated`` or ``recorded``); InputError when neither."""
    if not root.is_dir():
        raise InputError("not a directory", str(root))
    if (root / "meta.json").is_file() and (root / "nodes").is_dir():
        return SIMULATED
    if (root / "reports.jsonl").is_file():
        return RECORDED
    raise InputError("neither a simulated dataset (meta.json + nodes/) nor a recorded history "
                     "(reports.jsonl)", str(root))


def _read_text(path: Path) -> str:
    return read_bounded(path, limit=MAX_FILE, what="history file").decode("utf-8", errors="replace")


def ends_with_newline(path: Path) -> bool:
    """Whether the file's last byte is a newline (an empty file: True)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            if fh.tell() == 0:
                return True
            fh.seek(-1, 2)
            return fh.read(1) == b"\n"
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", str(path)) from None


def scan_csv(root: Path, name: str, required: tuple[str, ...], time_column: str | None, start: float,
             node: str | None = None) -> tuple[list[bytes], list[dict[str, str]], Damage | None]:
    """``(good lines with the header, their rows, damage)`` of ``root/name``; a missing file is
    damage too (``Harm.MISSING``, the whole window)."""
    path = root / name
    if not path.is_file():
        return [], [], Damage(name, Harm.MISSING, start, node)
    try:
        lines = list(iter_lines(path, max_line=MAX_LINE, what="CSV file"))
    except InputError as exc:  # binary data in the first block, unreadable
        return [], [], Damage(name, Harm.UNREADABLE, start, node, 1, str(exc).split(": ", 1)[-1])
    rows, damage = check_csv_lines(lines, ends_with_newline=ends_with_newline(path), path=name,
                                   required=required, time_column=time_column, start=start, node=node)
    header_ok = damage is None or damage.line != 1
    return (lines[:1 + len(rows)] if header_ok else []), rows, damage


def read_meta(root: Path) -> dict[str, Any]:
    path = root / "meta.json"
    try:
        meta = json.loads(_read_text(path))
    except ValueError as exc:
        raise ParseError(f"not JSON: {exc}", str(path)) from None
    if not isinstance(meta, dict):
        raise ParseError("not a JSON object", str(path))
    return meta


def read_csv(root: Path, name: str, required: tuple[str, ...]) -> list[dict[str, str]]:
    """Rows of ``root/name`` as dicts; [] when the file is absent."""
    path = root / name
    if not path.exists():
        return []
    return parse_csv(_read_text(path), str(path), required)


def read_lines(path: Path) -> list[str]:
    """Lines of a text file; [] when absent."""
    if not path.exists():
        return []
    return _read_text(path).splitlines()


def node_dirs(root: Path) -> list[str]:
    nodes = root / "nodes"
    try:
        return sorted(p.name for p in nodes.iterdir() if p.is_dir())
    except OSError as exc:
        raise InputError(f"cannot list: {exc.strerror or exc}", str(nodes)) from None


def read_node(root: Path, node: str, *, start: float, end: float, year: int | None,
              ib_interval_s: float | None = None) -> tuple[bytes | None, str | None, list[Damage]]:
    """``(kern.log bytes, ib.csv text, damage)`` of one simulated node: only the good part of
    each file (a cut last line is left out), None for a file that is absent.

    Damage: a missing folder or file (UNKNOWN from ``start``), a kernel log cut mid-line
    (UNKNOWN from its last complete line's time), an ib.csv cut or garbled (from its last good
    row), an ib.csv whose last row is more than two samples before ``end`` when the dataset says
    its ``ib_interval_s`` (the simulator writes a row at the last sample)."""
    d = root / "nodes" / node
    rel = f"nodes/{node}"
    if not d.is_dir():
        return None, None, [Damage(rel + "/", Harm.MISSING, start, node, detail="no node folder")]
    damage: list[Damage] = []
    kern = None
    kp = d / "kern.log"
    if not kp.is_file():
        damage.append(Damage(rel + "/kern.log", Harm.MISSING, start, node))
    else:
        kern = read_bounded(kp, limit=MAX_FILE, what="kernel log")
        if kern and not kern.endswith(b"\n"):
            cut = kern.rfind(b"\n") + 1
            lines = kern[:cut].splitlines()
            t, n = last_line_time(lines, year)
            damage.append(Damage(rel + "/kern.log", Harm.TRUNCATED, t if t is not None else start, node,
                                 n + 1, "cut mid-line"))
            kern = kern[:cut]
    good, rows, dmg = scan_csv(root, f"{rel}/ib.csv", ("time", "device", "port", "counter", "value"),
                               "time", start, node)
    if dmg is not None:
        damage.append(dmg)
    elif ib_interval_s and rows:
        last = max(float(r["time"]) for r in rows)
        if last < end - 2 * ib_interval_s:
            damage.append(Damage(f"{rel}/ib.csv", Harm.ENDS_EARLY, last, node, len(rows) + 1,
                                 f"last row {(end - last) / 3600:.1f} h before the end"))
    ib = b"\n".join(good).decode("utf-8", errors="replace") + "\n" if good else None
    return kern, ib, damage


def iter_reports(root: Path) -> Iterator[tuple[str, int, Any]]:
    """``(where, line number, decoded JSON)`` per non-empty line of ``reports.jsonl``."""
    path = root / "reports.jsonl"
    for i, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            yield str(path), i, json.loads(line)
        except ValueError as exc:
            raise ParseError(f"line {i}: not JSON ({exc})", str(path)) from None


@dataclass(frozen=True, slots=True)
class FleetFiles:
    """The fleet-wide files of a simulated dataset, their good rows, and the damage found."""

    fleet: list[dict[str, str]]
    maintenance: list[dict[str, str]]
    jobs: list[dict[str, str]]
    nodes: list[str]
    damage: list[Damage]


def scan_fleet(root: Path, meta: dict[str, Any], start: float) -> FleetFiles:
    """fleet.csv, maintenance.csv and jobs.csv checked row by row, and the fleet checked
    against the node folders and meta.json's node count. fleet.csv damage makes the nodes it
    does not list UNKNOWN; maintenance.csv or jobs.csv damage every node from its last good row
    (what came after it is not known)."""
    damage: list[Damage] = []
    _, fleet, dmg = scan_csv(root, "fleet.csv", ("node",), None, start)
    listed = {r["node"] for r in fleet}
    dirs = node_dirs(root)
    unlisted = tuple(n for n in dirs if n not in listed)
    want = meta.get("nodes")
    if dmg is None and isinstance(want, int) and len(fleet) < want:
        dmg = Damage("fleet.csv", Harm.TRUNCATED, start, line=len(fleet) + 2,
                     detail=f"{len(fleet)} of meta.json's {want} nodes")
    if dmg is None and unlisted:
        dmg = Damage("fleet.csv", Harm.UNLISTED, start, detail="node folders it does not list")
    if dmg is not None:
        damage.append(Damage(dmg.path, dmg.harm, start, None, dmg.line, dmg.detail, scope=unlisted))
    out: dict[str, list[dict[str, str]]] = {}
    for name, req, tcol in (("maintenance.csv", ("time", "node"), "time"),
                            ("jobs.csv", ("job_id", "start", "end", "nodes"), "start")):
        _, rows, dmg = scan_csv(root, name, req, tcol, start)
        out[name] = rows
        if dmg is not None:
            damage.append(dmg)
    return FleetFiles(fleet, out["maintenance.csv"], out["jobs.csv"], sorted(listed | set(dirs)), damage)

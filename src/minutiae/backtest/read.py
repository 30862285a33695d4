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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from minutiae.errors import InputError, ParseError
from minutiae.inputs import read_bounded
from minutiae.scoring.damage import Damage, Harm
from minutiae.scoring.read_damage import ends_with_newline, scan_csv
from minutiae.scoring.read_damage import read_node as read_node

SIMULATED = "simulated"
RECORDED = "recorded"
#: the largest history file read whole (reports.jsonl, a CSV)
MAX_FILE = 1 << 31


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


def read_meta(root: Path) -> dict[str, Any]:
    path = root / "meta.json"
    try:
        meta = json.loads(_read_text(path))
    except ValueError as exc:
        raise ParseError(f"not JSON: {exc}", str(path)) from None
    if not isinstance(meta, dict):
        raise ParseError("not a JSON object", str(path))
    return meta


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


def read_reports(root: Path) -> tuple[list[tuple[int, Any]], Damage | None]:
    """``(line number, decoded JSON)`` per non-empty line of ``reports.jsonl`` up to the first
    line that is not JSON (a recording cut mid-line, garbage), and that damage: every node is
    UNKNOWN from the last good report's time (what came after it is not known)."""
    path = root / "reports.jsonl"
    out: list[tuple[int, Any]] = []
    last = None
    lines = read_lines(path)
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as exc:
            cut = not ends_with_newline(path) and i == len(lines)
            return out, Damage("reports.jsonl", Harm.TRUNCATED if cut else Harm.GARBLED,
                               last if last is not None else 0.0, None, i, f"not JSON ({exc})",
                               fatal=True)
        out.append((i, doc))
        t = doc.get("time") if isinstance(doc, dict) else None
        if isinstance(t, int | float):
            last = float(t) if last is None else max(last, float(t))
    return out, None


def recorded_csv(root: Path, name: str, required: tuple[str, ...], time_column: str | None
                 ) -> tuple[list[dict[str, str]], Damage | None]:
    """An optional CSV beside reports.jsonl: its good rows and its damage (fatal), [] if absent."""
    _, rows, dmg = scan_csv(root, name, required, time_column, 0.0)
    if dmg is not None and dmg.harm is Harm.MISSING:
        return [], None
    return rows, replace(dmg, fatal=True) if dmg is not None else None


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
        damage.append(Damage(dmg.path, dmg.harm, start, None, dmg.line, dmg.detail, scope=unlisted,
                             fatal=True))
    out: dict[str, list[dict[str, str]]] = {}
    for name, req, tcol in (("maintenance.csv", ("time", "node"), "time"),
                            ("jobs.csv", ("job_id", "start", "end", "nodes"), "start")):
        _, rows, dmg = scan_csv(root, name, req, tcol, start)
        out[name] = rows
        if dmg is not None:
            damage.append(replace(dmg, fatal=True))
    return FleetFiles(fleet, out["maintenance.csv"], out["jobs.csv"], sorted(listed | set(dirs)), damage)

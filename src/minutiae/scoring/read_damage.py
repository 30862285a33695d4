"""The I/O side of :mod:`minutiae.scoring.damage`: a dataset's CSVs and node files read through
``minutiae.inputs`` (bounded) and checked, for the backtest and the sim eval readers alike.
Every function returns the good part of a file beside the damage it found; nothing is hidden.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from minutiae.errors import InputError
from minutiae.inputs import iter_lines, read_bounded
from minutiae.scoring.damage import Damage, Harm, check_csv_lines, cut_short, last_line_time

__all__ = ["IB_COLUMNS", "MAX_FILE", "MAX_LINE", "ends_with_newline", "read_node", "scan_csv",
           "short_by"]

#: the largest node file read whole (a kernel log)
MAX_FILE = 1 << 31
#: a CSV or log line is cut at this many bytes (the rest is counted, not kept)
MAX_LINE = 1 << 16
IB_COLUMNS = ("time", "device", "port", "counter", "value")


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


@lru_cache(maxsize=4)
def _written(path: str, mtime_ns: int, size: int) -> dict[str, int]:
    try:
        doc = json.loads(read_bounded(Path(path), limit=1 << 26, what="manifest.json"))
        files = doc.get("files") if isinstance(doc, dict) else None
        return {str(k): int(v) for k, v in files.items()} if isinstance(files, dict) else {}
    except (InputError, ValueError, TypeError):
        return {}  # an unreadable manifest checks nothing; the files are checked as before


def short_by(root: Path, rel: str) -> int:
    """How many bytes ``root/rel`` lacks of the size ``manifest.json`` says it was written with
    (0: whole, or no manifest: a dataset written before it existed, or not by the simulator)."""
    mp = root / "manifest.json"
    try:
        st = mp.stat()
        size = (root / rel).stat().st_size
    except OSError:
        return 0
    want = _written(str(mp), st.st_mtime_ns, st.st_size).get(rel)
    return max(0, want - size) if want is not None else 0


def scan_csv(root: Path, name: str, required: tuple[str, ...], time_column: str | None, start: float,
             node: str | None = None) -> tuple[list[bytes], list[dict[str, str]], Damage | None]:
    """``(good lines with the header, their rows, damage)`` of ``root/name``; a missing file is
    damage too (``Harm.MISSING``, the whole window), and so is a file whose rows are whole but
    which is shorter than ``manifest.json`` says it was written (cut at a row boundary)."""
    path = root / name
    if not path.is_file():
        return [], [], Damage(name, Harm.MISSING, start, node)
    try:
        lines = list(iter_lines(path, max_line=MAX_LINE, what="CSV file"))
    except InputError as exc:  # binary data in the first block, unreadable
        return [], [], Damage(name, Harm.UNREADABLE, start, node, 1, str(exc).split(": ", 1)[-1])
    rows, damage = check_csv_lines(lines, ends_with_newline=ends_with_newline(path), path=name,
                                   required=required, time_column=time_column, start=start, node=node)
    if damage is None and (missing := short_by(root, name)):
        damage = cut_short(name, rows, time_column=time_column, start=start, node=node, missing=missing)
    header_ok = damage is None or damage.line != 1
    return (lines[:1 + len(rows)] if header_ok else []), rows, damage




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
        elif kern is not None and (missing := short_by(root, rel + "/kern.log")):
            t, n = last_line_time(kern.splitlines(), year)
            damage.append(Damage(rel + "/kern.log", Harm.TRUNCATED, t if t is not None else start, node,
                                 n + 1, f"cut at a line boundary: {missing:,} bytes shorter than "
                                 "written (manifest.json)"))
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



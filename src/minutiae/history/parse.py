"""Pure row normaliser: CSV text (or column dicts from Parquet) → ``RunRecord``s plus issues.

Nothing here opens a file: ``minutiae.history.read`` reads and hands us text or rows.
Required columns: ``run_id``, ``time``, ``signature`` and one throughput column
(``seconds_per_step``, ``tokens_per_s`` or ``samples_per_s``). Every other column is an attribute
(``driver``, ``kernel``, ``nccl``, ``firmware`` …), except the usage columns ``gpus``,
``world_size``, ``duration_s``, ``gpu_hours``, ``start``, ``end``. A bad row never stops the load:
it is skipped and reported as an issue naming its line.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from minutiae.errors import DataError, ParseError
from minutiae.history.issues import HistoryIssue, IssueKind
from minutiae.history.record import CORE_COLUMNS, Metric, RunRecord

_SPLIT = re.compile(r"[\s;|]+")
_NODE_SEP = re.compile(r"[\s,;]+")
_HOSTLIST = re.compile(r"([^\[\],\s]*)\[([0-9,\-\s]+)\]([^\[\],\s]*)")
MAX_HOSTLIST = 100_000


@dataclass(frozen=True, slots=True)
class RunLoad:
    """What a load produced: the usable runs (input order) and everything worth saying about it."""

    records: tuple[RunRecord, ...]
    issues: tuple[HistoryIssue, ...]
    columns: tuple[str, ...] = ()


def parse_time(text: str) -> float:
    """Epoch seconds, or an ISO 8601 timestamp (naive means UTC)."""
    t = text.strip()
    try:
        value = float(t)
    except ValueError:
        try:
            dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"time {text!r} is neither epoch seconds nor ISO 8601") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        value = dt.timestamp()
    if not math.isfinite(value):
        raise ValueError(f"time {text!r} is not finite")
    return value


def expand_nodes(text: str) -> tuple[str, ...]:
    """Space/comma separated node names; Slurm hostlists such as ``gpu[001-003,007]`` expand."""
    if "[" not in text and "]" not in text:      # the common case: a plain list
        return tuple(dict.fromkeys(p for p in _NODE_SEP.split(text) if p))
    out: list[str] = []
    # protect commas inside brackets before splitting on commas
    depth = 0
    buf: list[str] = []
    parts: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if depth == 0 and (ch == "," or ch.isspace() or ch == ";"):
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    parts.append("".join(buf))
    for part in parts:
        if not part:
            continue
        m = _HOSTLIST.fullmatch(part)
        if not m:
            if "[" in part or "]" in part:
                raise ValueError(f"bad node list {part!r}")
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for rng in ranges.split(","):
            rng = rng.strip()
            if not rng:
                continue
            lo, _, hi = rng.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"bad node range {rng!r}")
            a, b = int(lo), int(hi or lo)
            if b < a or b - a > MAX_HOSTLIST or len(out) > MAX_HOSTLIST:
                raise ValueError(f"bad node range {rng!r}")
            width = len(lo)
            out.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(a, b + 1))
    return tuple(dict.fromkeys(out))


def _opt_float(row: Mapping[str, str], key: str) -> float | None:
    raw = (row.get(key) or "").strip()
    if not raw:
        return None
    v = float(raw)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{key} {raw!r} is not a finite non-negative number")
    return v


def _row_to_record(row: Mapping[str, str], metric: Metric, attr_cols: Sequence[str]) -> RunRecord:
    run_id = (row.get("run_id") or "").strip()
    signature = (row.get("signature") or "").strip()
    if not run_id:
        raise ValueError("empty run_id")
    if not signature:
        raise ValueError("empty signature")
    raw = (row.get(metric.value) or "").strip()
    if not raw:
        raise ValueError(f"missing {metric.value}")
    value = float(raw)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{metric.value} {raw!r} is not a positive number")
    time = parse_time(row.get("time") or "")
    nodes_text = (row.get("nodes") or "").strip()
    attrs = {}
    if nodes_text.isdigit():        # a node count, not names (the simulator's runs.csv)
        nodes: tuple[str, ...] = ()
        attrs["node_count"] = frozenset({str(int(nodes_text))})
    else:
        nodes = expand_nodes(nodes_text)
    for col in attr_cols:
        text = (row.get(col) or "").strip()
        attrs[col] = frozenset(v for v in _SPLIT.split(text) if v and v.lower() not in ("nan", "null", "none", "-"))
    gpus_f = _opt_float(row, "world_size")
    if gpus_f is None:
        gpus_f = _opt_float(row, "gpus")
    duration = _opt_float(row, "duration_s")
    start, end = _opt_float(row, "start"), _opt_float(row, "end")
    if duration is None and start is not None and end is not None and end >= start:
        duration = end - start
    gpu_hours = _opt_float(row, "gpu_hours")
    gpus = int(gpus_f) if gpus_f is not None else None
    if gpu_hours is not None and (gpus is None or duration is None):
        gpus, duration = 1, gpu_hours * 3600.0
    return RunRecord(run_id=run_id, time=time, signature=signature, value=value, metric=metric,
                     nodes=nodes, attrs=attrs, gpus=gpus, duration_s=duration)


def records_from_rows(rows: Iterable[Mapping[str, str]], columns: Sequence[str], where: str,
                      first_line: int = 2) -> RunLoad:
    """Normalise rows (values as text) whose header is ``columns``."""
    cols = [c.strip() for c in columns]
    missing = [c for c in ("run_id", "time", "signature") if c not in cols]
    metrics = [m for m in Metric if m.value in cols]
    if missing or not metrics:
        need = missing + ([] if metrics else ["seconds_per_step (or tokens_per_s / samples_per_s)"])
        raise DataError(f"missing column(s) {', '.join(need)}; header is {', '.join(cols) or '(empty)'}",
                        where)
    metric = metrics[0]
    attr_cols = [c for c in cols if c and c not in CORE_COLUMNS]
    records: list[RunRecord] = []
    issues: list[HistoryIssue] = []
    bad = 0
    for i, row in enumerate(rows):
        try:
            records.append(_row_to_record(row, metric, attr_cols))
        except (ValueError, TypeError, OverflowError) as exc:
            bad += 1
            if bad <= 20:
                issues.append(HistoryIssue(IssueKind.BAD_ROW, f"{where}:{first_line + i}: {exc}; row skipped"))
    if bad > 20:
        issues.append(HistoryIssue(IssueKind.BAD_ROW, f"{where}: {bad - 20} more bad rows skipped"))
    if not records:
        raise DataError(f"no usable runs ({bad} bad rows)", where)
    return RunLoad(tuple(records), tuple(issues), tuple(cols))


def parse_runs_csv(text: str, where: str) -> RunLoad:
    """Parse a runs CSV (see module doc). Raises ``ParseError``/``DataError`` naming ``where``."""
    if "\x00" in text:
        raise ParseError("binary data (NUL bytes), not a CSV", where)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames
        if not header:
            raise DataError("empty file (no header)", where)
        rows = []
        for row in reader:
            rows.append({k: (v if isinstance(v, str) else "") for k, v in row.items() if isinstance(k, str)})
    except csv.Error as exc:
        raise ParseError(f"not a CSV: {exc}", where) from None
    return records_from_rows(rows, header, where)

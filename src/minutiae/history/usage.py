"""Join a scheduler job table (``jobs.csv`` of docs/dataset.md: ``job_id,start,end,nodes,
world_size``) onto runs whose ``run_id`` is the job id (pure): fills GPU count, duration and node
names that the runs file lacks (the simulator's runs.csv carries only a node count)."""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Sequence
from dataclasses import dataclass

from minutiae.errors import ParseError
from minutiae.history.issues import HistoryIssue, IssueKind
from minutiae.history.parse import expand_nodes, parse_time
from minutiae.history.record import RunRecord


@dataclass(frozen=True, slots=True)
class JobUsage:
    gpus: int | None
    duration_s: float | None
    nodes: tuple[str, ...]


def parse_jobs_csv(text: str, where: str) -> tuple[dict[str, JobUsage], list[HistoryIssue]]:
    if "\x00" in text:
        raise ParseError("binary data (NUL bytes), not a CSV", where)
    out: dict[str, JobUsage] = {}
    issues: list[HistoryIssue] = []
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if "job_id" not in (reader.fieldnames or []):
            raise ParseError("missing column job_id", where)
        for i, row in enumerate(reader):
            try:
                jid = (row.get("job_id") or "").strip()
                if not jid:
                    raise ValueError("empty job_id")
                start, end = row.get("start") or "", row.get("end") or ""
                dur = parse_time(end) - parse_time(start) if start.strip() and end.strip() else None
                ws = (row.get("world_size") or "").strip()
                out[jid] = JobUsage(int(float(ws)) if ws else None,
                                    dur if dur is not None and dur >= 0 else None,
                                    expand_nodes(row.get("nodes") or ""))
            except (ValueError, TypeError, OverflowError) as exc:
                if len(issues) < 20:
                    issues.append(HistoryIssue(IssueKind.BAD_ROW, f"{where}:{i + 2}: {exc}; row skipped"))
    except csv.Error as exc:
        raise ParseError(f"not a CSV: {exc}", where) from None
    return out, issues


def join_usage(records: Sequence[RunRecord], jobs: dict[str, JobUsage]) -> tuple[list[RunRecord], int]:
    """Fill missing gpus/duration/nodes from ``jobs``; returns the runs and how many were joined."""
    out, joined = [], 0
    for r in records:
        j = jobs.get(r.run_id)
        if j is None:
            out.append(r)
            continue
        joined += 1
        out.append(dataclasses.replace(
            r, gpus=r.gpus if r.gpus is not None else j.gpus,
            duration_s=r.duration_s if r.duration_s is not None else j.duration_s,
            nodes=r.nodes or j.nodes))
    return out, joined

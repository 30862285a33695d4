"""What is worth telling the user about a run history (never silently dropped)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class IssueKind(Enum):
    BAD_ROW = "bad_row"                  # a row that could not be read (skipped, named by line)
    DUPLICATE = "duplicate"              # the same run twice (kept once)
    CONFLICT = "conflict"                # one run_id with different contents (first kept)
    SINGLE_RUN = "single_run"            # a signature seen once: no series, no change points
    MISSING_VERSION = "missing_version"  # a software attribute empty on some runs (unknown)
    CLOCK_SKEW = "clock_skew"            # times in the future or before the clock was set
    MIXED_SIZES = "mixed_sizes"          # one signature run at several world sizes
    JOINED = "joined"                    # usage or node names taken from the scheduler's jobs.csv


@dataclass(frozen=True, slots=True)
class HistoryIssue:
    kind: IssueKind
    message: str
    run_ids: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind.value, "message": self.message, "run_ids": list(self.run_ids)}

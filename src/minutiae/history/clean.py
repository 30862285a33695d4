"""Input hygiene over parsed runs (pure): duplicates, conflicts, signatures seen once, missing
versions and clock skew. Returns the cleaned runs sorted by time and the issues found."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from minutiae.history.issues import HistoryIssue, IssueKind
from minutiae.history.record import STACK_KEYS, RunRecord

#: a run more than this far in the future of "now" has a skewed clock
FUTURE_TOLERANCE_S = 300.0
#: a run dated before 2000-01-01 comes from a node whose clock was never set
CLOCK_UNSET_BEFORE = 946_684_800.0


def _same(a: RunRecord, b: RunRecord) -> bool:
    return (a.signature == b.signature and abs(a.time - b.time) < 1.0
            and abs(a.value - b.value) <= 1e-9 * max(a.value, b.value) and set(a.nodes) == set(b.nodes))


def _size_key(label: str) -> tuple[int, str]:
    head = label.split(" ")[0]
    return (int(head), label) if head.isdigit() else (-1, label)


def clean_runs(records: Sequence[RunRecord], now: float | None = None,
               columns: Sequence[str] = ()) -> tuple[list[RunRecord], list[HistoryIssue]]:
    """Deduplicate and check ``records``; ``now`` (from the injected clock) enables the
    future-time check; ``columns`` lists the input columns (to report missing versions only for
    attributes the input has)."""
    issues: list[HistoryIssue] = []
    runs = _dedupe(records, issues)
    runs = _twins(runs, issues)
    _check_series(runs, issues)
    for attr in (c for c in columns if c in STACK_KEYS):
        missing = [r.run_id for r in runs if not r.attrs.get(attr)]
        if missing:
            issues.append(HistoryIssue(IssueKind.MISSING_VERSION,
                                       f"{attr} missing on {len(missing)} of {len(runs)} runs "
                                       "(treated as unknown, never as unchanged)", tuple(missing[:50])))
    return _check_clock(runs, now, issues), issues


def _dedupe(records: Sequence[RunRecord], issues: list[HistoryIssue]) -> list[RunRecord]:
    by_id: dict[str, RunRecord] = {}
    dups: list[str] = []
    conflicts: list[str] = []
    for r in records:
        prev = by_id.get(r.run_id)
        if prev is None:
            by_id[r.run_id] = r
        elif _same(prev, r):
            dups.append(r.run_id)
        else:
            conflicts.append(r.run_id)
    if dups:
        issues.append(HistoryIssue(IssueKind.DUPLICATE,
                                   f"{len(dups)} duplicate run row(s) ignored (same run_id and contents)",
                                   tuple(dups[:50])))
    if conflicts:
        issues.append(HistoryIssue(IssueKind.CONFLICT,
                                   f"{len(conflicts)} run_id(s) appear with different contents; "
                                   "the first row of each was kept", tuple(conflicts[:50])))
    return sorted(by_id.values(), key=lambda r: (r.time, r.run_id))


def _twins(runs: list[RunRecord], issues: list[HistoryIssue]) -> list[RunRecord]:
    """The same run recorded under two ids: same signature, time, value and nodes."""
    twin: list[str] = []
    by_sig_time: dict[tuple[str, int], RunRecord] = {}
    kept: list[RunRecord] = []
    for r in runs:
        key = (r.signature, round(r.time))
        other = by_sig_time.get(key)
        if other is not None and _same(other, r):
            twin.append(r.run_id)
            continue
        by_sig_time[key] = r
        kept.append(r)
    if twin:
        issues.append(HistoryIssue(IssueKind.DUPLICATE,
                                   f"{len(twin)} run(s) identical to another run under a different "
                                   "run_id (same signature, time, throughput, nodes) ignored", tuple(twin[:50])))
    return kept


def _check_series(runs: list[RunRecord], issues: list[HistoryIssue]) -> None:
    sizes: dict[str, set[str]] = {}
    for r in runs:
        sizes.setdefault(r.signature, set()).add(r.size)
    mixed = sorted(s for s, z in sizes.items() if len(z) > 1)
    if mixed:
        issues.append(HistoryIssue(IssueKind.MIXED_SIZES, "; ".join(
            f"{s} runs at {len(sizes[s])} sizes ({', '.join(sorted(sizes[s], key=_size_key))})" for s in mixed[:5])
            + " — the signature should include the world size; each size is compared with itself"))
    counts = Counter(r.signature for r in runs)
    once = sorted(s for s, c in counts.items() if c == 1)
    if once:
        issues.append(HistoryIssue(IssueKind.SINGLE_RUN,
                                   f"{len(once)} signature(s) seen once (no series to compare): "
                                   + ", ".join(once[:10]) + (" …" if len(once) > 10 else "")))


def _check_clock(runs: list[RunRecord], now: float | None,
                 issues: list[HistoryIssue]) -> list[RunRecord]:
    if now is not None:
        future = [r.run_id for r in runs if r.time > now + FUTURE_TOLERANCE_S]
        if future:
            runs = [r for r in runs if r.time <= now + FUTURE_TOLERANCE_S]
            issues.append(HistoryIssue(IssueKind.CLOCK_SKEW,
                                       f"{len(future)} run(s) time-stamped in the future (clock skew?) "
                                       "left out of the analyses: " + ", ".join(future[:10]),
                                       tuple(future[:50])))
    unset = [r.run_id for r in runs if r.time < CLOCK_UNSET_BEFORE]
    if unset:
        issues.append(HistoryIssue(IssueKind.CLOCK_SKEW,
                                   f"{len(unset)} run(s) dated before 2000 (node clock not set?); kept",
                                   tuple(unset[:50])))
    return runs

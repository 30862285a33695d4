"""What each false alarm of the straggler analysis came from (issue 13), most specific first.

The scorecard's ``false_alarm_causes`` takes, for a false alarm, the shortest benign truth that
fits its kind; every job carries job-long benign classes (GC pauses, sequence-length variance,
pipeline imbalance, the timing structures of ``sim/world/shape.py``), so a straggler false alarm
is put on whichever of them sorts first. Here the truth that names the alarm's own GPU comes
first (a lottery offset, a wander excursion, a hot expert's spell on that GPU), then the alarm's
node, then a structure of the alarm's job that only some jobs have (``SPECIFIC``: an MoE job's
hot experts, whose one-logged-step spells are not listed per GPU; a restart's first steps), then
the noise every job has (the shortest; several job-long classes alike: ``job-wide noise``), and
``none`` when nothing benign covers it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from minutiae.scoring.explain import Explains
from minutiae.scoring.score import Detection, ScoreParams, _Index, gpu_of, merge_alarms
from minutiae.scoring.truth import TruthEvent

#: job-level structures only some jobs have (a share of jobs, or MoE signatures): more specific
#: than the noise every job has (tails, per-node noise, GC pauses, sequence lengths, stages)
SPECIFIC = frozenset({"moe_hot_expert", "job_restart", "wait_included_totals", "ring_collective"})


def _rank(d: Detection, t: TruthEvent) -> tuple[int, float]:
    tier = 2 if t.cls in SPECIFIC else 3
    if t.node is not None and t.node == d.node:
        tier = 0 if t.component is not None and t.component == gpu_of(d) else 1
    return tier, t.end - t.start


#: the cause of a false alarm that only job-long classes cover, several of them alike
JOB_WIDE = "job-wide noise"


def _cause(d: Detection, cands: list[TruthEvent]) -> str:
    """The most specific candidate's class; ``JOB_WIDE`` when the best are job-long classes
    that cover the alarm alike (nothing says which of them it was)."""
    if not cands:
        return "none"
    ranks = [_rank(d, c) for c in cands]
    best = min(ranks)
    tied = {c.cls for c, r in zip(cands, ranks, strict=True) if r == best}
    return JOB_WIDE if best[0] == 3 and len(tied) > 1 else min(zip(ranks, (c.cls for c in cands), strict=True))[1]


def straggler_causes(truth: Sequence[TruthEvent], detections: Iterable[Detection],
                     params: ScoreParams, explains: Explains | None = None) -> dict[str, int]:
    """False alarms of ``detections`` (merged as the scorecard merges them; a true alarm is one
    the scorecard matches to a harmful fault) by the benign class that explains them best
    (among the classes their kind can explain)."""
    idx = _Index(truth, explains)
    benign: dict[str, list[TruthEvent]] = {}
    fleet = [t for t in truth if not t.harmful and t.details.get("scope") == "fleet"]
    for t in truth:
        if t.harmful:
            continue
        for node in ([t.node] if t.node is not None else t.details.get("nodes", ())):
            benign.setdefault(str(node), []).append(t)
    out: dict[str, int] = {}
    for a in merge_alarms(detections, params):
        hit = idx.match(a, params)
        if (hit is not None and hit.harmful) or idx.expected_finding(a, params):
            continue
        fits = set(idx.explains.of(a.key, a.kind))
        cands = [c for c in benign.get(a.node or "", []) + fleet
                 if c.start - params.slack_s <= a.time <= c.end + params.grace_s
                 and c.cls in fits]
        cause = _cause(a, cands)
        out[cause] = out.get(cause, 0) + 1
    return dict(sorted(out.items()))

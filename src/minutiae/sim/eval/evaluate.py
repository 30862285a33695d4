"""``minutiae eval``: run the detector registry over a dataset and score it against the truth.

The ``all`` scorecard scores the union of every available detector's detections (what an
operator running the whole of minutiae would see); each detector also gets its own card.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from minutiae.scoring.score import Detection, Scorecard, ScoreParams, merge_alarms, score
from minutiae.sim.dataset import Dataset, load_dataset
from minutiae.sim.eval.causes import straggler_causes
from minutiae.sim.eval.detectors import DetectorResult
from minutiae.sim.eval.run import run_detectors


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The outcome of eval: the dataset, every detector's result and scorecard, and the union."""

    dataset: Dataset
    detectors: tuple[DetectorResult, ...]
    cards: tuple[Scorecard, ...]
    overall: Scorecard
    params: ScoreParams
    #: the straggler analysis' false alarms by their most specific benign cause (``causes.py``)
    straggler_causes: Mapping[str, int] = field(default_factory=dict)

    def drains(self) -> list[dict[str, Any]]:
        """What would have been drained and why, with the truth that explains it (or not)."""
        from minutiae.scoring.score import _Index

        idx = _Index(self.dataset.truth, self.dataset.explains)
        dets = [d for r in self.detectors for d in r.detections]
        out = []
        seen: dict[str | None, float] = {}
        for a in merge_alarms(dets, self.params):
            if not a.drain:
                continue
            if a.node in seen and a.time - seen[a.node] <= self.params.merge_s:
                continue
            seen[a.node] = a.time
            t = idx.match(a, self.params)
            verdict = "right" if (t is not None and t.harmful and t.expect_drain) else "wrong"
            out.append({"node": a.node, "time": a.time, "detector": a.detector, "kind": a.key,
                        "reason": a.reason, "truth": t.cls if t is not None else None,
                        "truth_id": t.id if t is not None else None, "verdict": verdict})
        return out

    def to_json(self) -> dict[str, Any]:
        ds = self.dataset
        return {
            "dataset": {"path": str(ds.root), "nodes": len(ds.fleet), "gpus_per_node": ds.gpus,
                        "days": round((ds.end - ds.start) / 86400.0, 4), "seed": ds.meta.get("seed"),
                        "node_days": round(ds.node_days, 3), "jobs": len(ds.jobs),
                        "faults": sum(1 for t in ds.truth if t.harmful),
                        "benign": sum(1 for t in ds.truth if not t.harmful)},
            "detectors": [r.to_json() for r in self.detectors],
            "overall": self.overall.to_json(),
            "per_detector": {c.detector: c.to_json() for c in self.cards},
            "straggler_false_alarm_causes": dict(self.straggler_causes),
            "drains": self.drains(),
            "damage": [d.to_json() for d in ds.damage],
        }


#: from this many node-days on, eval runs its detectors in ``min(2, CPUs)`` worker processes
#: (clean forkserver workers: no thread pool is inherited); below, in this process (a worker's
#: start and imports cost more than a small dataset's detectors)
PARALLEL_NODE_DAYS = 100.0


def default_jobs(ds: Dataset) -> int:
    return min(2, os.cpu_count() or 1) if ds.node_days >= PARALLEL_NODE_DAYS else 1


def without_damage(r: DetectorResult, ds: Dataset) -> DetectorResult:
    """``r`` without its detections inside UNKNOWN (damaged) node-windows: a node whose data is
    missing or cut is not reporting there, so nothing it seems to say is counted (a note says
    how many were left out)."""
    if not ds.damage or not r.detections:
        return r
    kept = tuple(d for d in r.detections if ds.unknown(d.node, d.time) is None)
    if len(kept) == len(r.detections):
        return r
    note = (f"{len(r.detections) - len(kept)} detection(s) inside UNKNOWN node-windows (damaged "
            "input) not counted")
    return replace(r, detections=kept, notes=(*r.notes, note))


def evaluate(root: Path | str, detectors: Iterable[str] | None = None,
             progress: Callable[[str], None] | None = None, jobs: int | None = None,
             allow_damaged: bool = False) -> Evaluation:
    """``jobs``: worker processes for the detectors (None: ``default_jobs``; 1: this process).
    ``allow_damaged``: score a dataset whose fleet-wide files are damaged (their nodes UNKNOWN)."""
    from minutiae.analyses.stragglers.floor import DEFAULT_MIN_SLOWDOWN

    ds = load_dataset(root, allow_damaged=allow_damaged)
    jobs = default_jobs(ds) if jobs is None else jobs
    # the straggler analysis runs with its default floor (detectors/stragglers.py): a GPU whose
    # benign offset reaches it is a finding its docs allow, not a false alarm (score.py)
    params = replace(ScoreParams.from_cost(ds.meta.get("cost", {}), ds.gpus),
                     slow_gpu_floor=DEFAULT_MIN_SLOWDOWN)
    results = tuple(without_damage(r, ds) for r in run_detectors(ds, detectors, progress, jobs))
    cards = tuple(score(ds.truth, r.detections, ds.node_days, params, r.name, ds.explains)
                  for r in results if r.available)
    union: list[Detection] = [d for r in results for d in r.detections]
    overall = score(ds.truth, union, ds.node_days, params, "all", ds.explains)
    stragglers = [d for r in results if r.name == "stragglers" for d in r.detections]
    causes = straggler_causes(ds.truth, stragglers, params, ds.explains) if stragglers else {}
    return Evaluation(ds, results, cards, overall, params, causes)

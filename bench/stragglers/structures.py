"""minutiae's straggler detector on jobs from the independent generator (``worlds.py``).

    .venv/bin/python bench/stragglers/structures.py [--seeds 10] [--only NAME] [--json out.json]

Benign structures: suspects per job (goal: 0 on every seed). Faults: found (the right GPU /
node), delay in steps from the onset (goals: +10 % GPU <= 5, +5 % <= 20, +3 % <= 50, node +5 %
<= 20, node slow from step 0 found), and other suspects in the same job. Each job goes through
the public path (long table -> ``prepare`` -> ``analyse``), as the CLI does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parents[1] / "src"))
sys.path.insert(0, str(ROOT))

import worlds  # noqa: E402

from minutiae.analyses.stragglers.analysis import Options  # noqa: E402
from minutiae.analyses.stragglers.runs import analyse_runs  # noqa: E402
from minutiae.errors import MinutiaeError  # noqa: E402

GOALS = {"gpu+10%": 5, "gpu+5%": 20, "gpu+3%": 50, "node+5%": 20, "node+8%_from0": None,
         "node+5%_after_restart": 20, "gpu+10%_before_restart": 5, "wait_total_gpu+10%": None, "ring_link+30%": None}


def run_one(w: worlds.World) -> dict:
    df = worlds.table(w)
    t0 = time.perf_counter()
    try:
        report = analyse_runs(df, w.name, None, Options())
    except MinutiaeError as exc:
        return {"error": str(exc), "suspects": [], "warnings": [], "seconds": 0.0}
    out = {"suspects": [s.to_json() for s in report.suspects], "warnings": list(report.warnings),
           "stopped": len(report.stopped), "grouping": report.grouping,
           "seconds": time.perf_counter() - t0}
    out.update(_extra(report))
    return out


def _extra(report: object) -> dict:
    """Fields the detector may add for issue 13 (absent today: reported as such)."""
    j = report.to_json()  # type: ignore[attr-defined]
    return {k: j[k] for k in ("job_level", "segments", "data_limits") if k in j}


def truth_match(w: worlds.World, s: dict) -> bool:
    f = w.faults[0]
    if f.kind == "gpu":
        return s["scope"] == "gpu" and f.target in s["ranks"]
    return s["component"] == f"node:{worlds.fault_nodes(w)[f]}"


def onset_step(w: worlds.World) -> int:
    f = w.faults[0]
    if w.restarts and w.steps_reset:
        starts = [0, *w.restarts]
        seg = int(worlds.segment_of(w)[f.start])
        return f.start - starts[seg]
    return f.start


def benign_rows(seeds: int, only: str | None) -> list[dict]:
    rows = []
    for name in [w.name for w in worlds.benign(0)]:
        if only and only not in name:
            continue
        runs = []
        for seed in range(seeds):
            w = next(x for x in worlds.benign(seed) if x.name == name)
            runs.append(run_one(w))
        counts = [len(r["suspects"]) for r in runs]
        errors = sum(1 for r in runs if "error" in r)
        sus = [s for r in runs for s in r["suspects"]]
        rows.append({"structure": name, "ranks": next(x for x in worlds.benign(0) if x.name == name).ranks,
                     "seeds": seeds, "jobs_with_suspects": sum(c > 0 for c in counts),
                     "suspects_total": sum(counts), "suspects_max": max(counts),
                     "stopped": sum(r.get("stopped", 0) for r in runs), "refused": errors,
                     "scopes": sorted({s["scope"] for s in sus}),
                     "median_slowdown": (statistics.median(s["slowdown"] for s in sus)
                                         if sus else None),
                     "warnings": sorted({w[:90] for r in runs for w in r["warnings"]})[:4],
                     "grouping": runs[0].get("grouping", runs[0].get("error", ""))[:60],
                     "seconds": statistics.median(r["seconds"] for r in runs)})
    return rows


def fault_rows(seeds: int, only: str | None) -> list[dict]:
    rows = []
    for name in [w.name for w in worlds.faulty(0)]:
        if only and only not in name:
            continue
        found, delays, other, warns, extra = 0, [], 0, set(), []
        for seed in range(seeds):
            w = next(x for x in worlds.faulty(seed) if x.name == name)
            r = run_one(w)
            series = "communication" if w.ring else "step" if w.wait_total else None
            if series is not None:  # job-level findings: the data cannot name a rank
                onset = w.ring_onset if w.ring else w.faults[0].start
                ch = [c for c in r.get("job_level", []) if c["series"] == series]
                if ch and (not w.wait_total or r.get("data_limits")):
                    found += 1
                    delays.append(min(c["step"] for c in ch) - onset + 1)
                other += len(r["suspects"])
            elif w.faults:
                hit = [s for s in r["suspects"] if truth_match(w, s)]
                if hit:
                    found += 1
                    delays.append(min(s["detected_step"] for s in hit) - onset_step(w) + 1)
                other += len(r["suspects"]) - len(hit)
            warns |= {x[:90] for x in r["warnings"]}
            extra.append({k: v for k, v in r.items() if k in ("job_level", "data_limits")})
        goal = GOALS.get(name)
        rows.append({"fault": name, "seeds": seeds, "found": found,
                     "delay_p50": statistics.median(delays) if delays else None,
                     "delay_max": max(delays) if delays else None, "goal_within": goal,
                     "within_goal": (sum(d <= goal for d in delays) if goal else None),
                     "other_suspects": other, "warnings": sorted(warns)[:4],
                     "extra": extra[0] if extra else {}})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--only")
    ap.add_argument("--json")
    a = ap.parse_args()
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    b = benign_rows(a.seeds, a.only)
    f = fault_rows(a.seeds, a.only)
    print(f"== benign structures ({a.seeds} seeds each; goal 0 suspects)")
    print(f"{'structure':<26} {'ranks':>5} {'jobs w/ sus':>11} {'suspects':>8} {'max':>4} "
          f"{'stopped':>7} {'refused':>7}  scopes / peers")
    for r in b:
        print(f"{r['structure']:<26} {r['ranks']:>5} {r['jobs_with_suspects']:>11} "
              f"{r['suspects_total']:>8} {r['suspects_max']:>4} {r['stopped']:>7} "
              f"{r['refused']:>7}  {','.join(r['scopes']) or '-'} / {r['grouping']}")
    print(f"\n== faults under TP-shared + AR(1) 0.95 + lottery 0.7 % + t(4) noise ({a.seeds} seeds)")
    print(f"{'fault':<24} {'found':>5} {'delay p50':>9} {'max':>4} {'goal':>5} {'in goal':>7} "
          f"{'other sus':>9}")
    for r in f:
        goal = "-" if r["goal_within"] is None else f"<={r['goal_within']}"
        print(f"{r['fault']:<24} {r['found']:>5} {_s(r['delay_p50']):>9} {_s(r['delay_max']):>4} "
              f"{goal:>5} {_s(r['within_goal']):>7} {r['other_suspects']:>9}")
    print("(wait_total: found = the collective-wait limit said and a job-level step-time change;"
          " ring: a job-level communication change; delay = change step - onset + 1)")
    for r in f:
        if r["extra"].get("job_level") or r["extra"].get("data_limits"):
            print(f"  {r['fault']} (seed 0): {json.dumps(r['extra'])[:300]}")
    print(f"\n{time.perf_counter() - t0:.0f} s wall, load {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"benign": b, "faults": f}, indent=1, default=str))


def _s(x: object) -> str:
    return "-" if x is None else (f"{x:.0f}" if isinstance(x, float) else str(x))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()

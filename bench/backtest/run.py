"""Benchmark: `minutiae backtest` on a week of a 1,024-node simulated fleet (goal: <= 60 s).

Figures (medians of --repeats runs, wall and CPU seconds):
  load     kern.log + ib.csv of every node -> reports (kernel-log rules, log-count engine,
           counter rules), in this process (CPU measurable) and in --jobs worker processes
  replay   the reconcile step every 60 s of simulated time, with budget, ladder, storms
  total    parallel load + replay: what `minutiae backtest DIR` costs
Baselines in the same run:
  events   a plain pass over the same events that applies them to the fleet without
           reconciling (the floor of any replay): replay / events
  plain    replay with fast=False (reconcile on every step with full reports) on the first
           day only: plain / fast on that day, and both produce the same decisions

The dataset is written once by the simulator (`minutiae.sim`) into --data and reused.
Usage: .venv/bin/python bench/backtest/run.py [--nodes 1024] [--days 7] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from minutiae.backtest.history import EventKind, History, load_history
from minutiae.backtest.replay import replay, summary
from minutiae.controller.policy import load_policy

T0 = 1_780_000_000.0


def ensure_dataset(root: Path, nodes: int, days: float, seed: int) -> Path:
    meta = root / "meta.json"
    if meta.is_file():
        m = json.loads(meta.read_text())
        if m.get("nodes") == nodes and abs(float(m.get("days", 0)) - days) < 1e-6 and m.get("seed") == seed:
            return root
    from minutiae.sim.emit.writer import write_dataset
    from minutiae.sim.world.plan import make_plan
    from minutiae.sim.world.profile import load_profile

    t = time.perf_counter()
    print(f"writing a {nodes}-node, {days:g}-day dataset to {root} (once) ...", flush=True)
    write_dataset(make_plan(load_profile(), nodes, 8, days, seed, T0), root)
    print(f"  written in {time.perf_counter() - t:.0f} s", flush=True)
    return root


def timed(fn, *args, **kw):  # type: ignore[no-untyped-def]
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kw)
    return out, time.perf_counter() - w, time.process_time() - c


def events_only(h: History) -> int:
    """Apply every event to a per-node dict, no reconcile: the floor of a replay."""
    views: dict[str, tuple[object, object]] = {n: (None, ()) for n in h.nodes}
    n = 0
    for ev in h.events:
        rep, jobs = views.get(ev.node, (None, ()))
        if ev.kind is EventKind.REPORT:
            rep = ev.report
        elif ev.kind is EventKind.JOBS:
            jobs = ev.jobs
        views[ev.node] = (rep, jobs)
        n += 1
    return n


def first_day(h: History) -> History:
    end = h.start + 86400.0
    return replace(h, end=end, events=tuple(e for e in h.events if e.time <= end),
                   truth=tuple(t for t in h.truth if t.start <= end))


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", type=Path, default=Path("/tmp/minutiae-bench-backtest"))
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    a = ap.parse_args()
    root = ensure_dataset(a.data / f"{a.nodes}x{a.days:g}d-s{a.seed}", a.nodes, a.days, a.seed)
    policy = load_policy()
    loads, ploads, replays, bases = [], [], [], []
    h = r = None
    for _ in range(a.repeats):
        h, lw, lc = timed(load_history, root)
        h2, pw, _pc = timed(load_history, root, jobs=a.jobs)
        assert h2.events == h.events
        r, rw, rc = timed(replay, h, policy)
        _n, bw, bc = timed(events_only, h)
        loads.append((lw, lc))
        ploads.append(pw)
        replays.append((rw, rc))
        bases.append((bw, bc))
    assert h is not None and r is not None
    lw, lc = med([x[0] for x in loads]), med([x[1] for x in loads])
    pw = med(ploads)
    rw, rc = med([x[0] for x in replays]), med([x[1] for x in replays])
    bw, bc = med([x[0] for x in bases]), med([x[1] for x in bases])
    s = summary(r)
    print(f"backtest benchmark: {len(h.nodes)} nodes x {(h.end - h.start) / 86400:.1f} days, "
          f"{len(h.events)} events, {r.steps} reconcile steps of {r.step_s:g} s "
          f"(median of {a.repeats}; wall / CPU seconds)")
    print(f"  load    {lw:7.2f} s wall  {lc:7.2f} s CPU   kern.log + ib.csv -> reports, 1 process")
    print(f"  load/{a.jobs}  {pw:7.2f} s wall                 the same in {a.jobs} worker processes "
          f"(same events)")
    print(f"  replay  {rw:7.2f} s wall  {rc:7.2f} s CPU   reconcile + budget + scoring")
    print(f"  total   {pw + rw:7.2f} s wall  {lc + rc:7.2f} s CPU   (goal <= 60 s; wall with "
          f"load/{a.jobs})")
    print(f"  events  {bw:7.3f} s wall  {bc:7.3f} s CPU   baseline: the same events, no reconcile; "
          f"replay/events = {rc / max(bc, 1e-9):.0f}x CPU")
    print(f"  decided: {s['drains']} drains on {s['nodes_drained']} nodes, {s['holds']} holds, "
          f"{s['escalations']} escalations, {s['resumes']} resumes; against truth: "
          f"{s.get('right_drains')} right, {s.get('wrong_drains')} wrong, {s.get('missed_drains')} missed")
    day = first_day(h)
    fast, fw, fc = timed(replay, day, policy)
    plain, pw, pc = timed(replay, day, policy, fast=False)
    same = fast.decisions == plain.decisions
    print(f"  first day: fast {fc:.2f} s CPU ({fast.steps} steps) vs plain {pc:.2f} s CPU "
          f"({plain.steps} steps): plain/fast = {pc / max(fc, 1e-9):.1f}x, same decisions: {same}")
    la = os.getloadavg()
    print(f"  machine: {os.cpu_count()} CPUs, load average {la[0]:.1f} / {la[1]:.1f} / {la[2]:.1f} "
          "(1/5/15 min) at the end of the run")
    ok = pw + rw <= 60.0 and same
    print("  PASS" if ok else "  FAIL (over 60 s or decisions differ)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""``whatchanged RUN_A RUN_B``: everything that differs between two runs, each difference ranked
by how well it explains the slowdown across the whole history (pure).

For every difference we build the indicator "the run has B's side of it" (B's driver version,
a node B used and A did not, not using a node A used …), then estimate its within-signature
effect over all runs (:func:`minutiae.analyses.whatchanged.stats.fe_effect`). A difference
explains the change when its effect has the same sign and a comparable size, with a small p-value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from minutiae.analyses.regress.detect import robust_sigma
from minutiae.analyses.whatchanged.stats import Effect, fe_effect, fe_joint, make_panel
from minutiae.errors import DataError
from minutiae.history.record import RunRecord

#: nodes differing between the two runs that we test one by one (largest jobs differ on thousands)
MAX_NODE_TESTS = 4096
#: runs needed after the earlier of the two runs to test the recent window as well
MIN_RECENT_RUNS = 30
RECENT_ALPHA = 0.01
#: leading candidates fitted jointly
JOINT_TOP = 8


@dataclass(frozen=True, slots=True)
class Difference:
    """One thing that differs. ``kind``: ``attr`` (software/config), ``node_added`` (B used it, A
    did not), ``node_removed``, ``signature``. ``effect``: what B's side of it does to step time over
    the whole history (None: it never varies within a signature, so the history cannot tell).
    ``explains``: effect / observed change (1.0 = accounts for all of it; None without an effect, or
    when the observed change is within run-to-run noise, p ≥ 0.05). ``rank``: 1 = best explanation. ``since``: the effect was measured over runs from this time on (the
    earlier of the two runs) because that window holds stronger evidence than the whole history
    (p-values are doubled for the choice of window); None = the whole history. ``joint``: for the
    leading candidates, the effect net of the other leading candidates (fitted together over the
    whole history); the leading candidates are ranked by it."""

    kind: str
    key: str
    a: str
    b: str
    effect: Effect | None
    explains: float | None
    summary: str
    rank: int = 0
    since: float | None = None
    joint: Effect | None = None

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "kind": self.kind, "key": self.key, "a": self.a, "b": self.b,
                "effect": self.effect.to_json() if self.effect else None,
                "explains": None if self.explains is None else round(self.explains, 4),
                "since": self.since,
                "joint": self.joint.to_json() if self.joint else None,
                "summary": self.summary}


@dataclass(frozen=True, slots=True)
class WhatChanged:
    """``change``: B's step time vs A's (fraction, + = B slower); within one signature it is a
    direct ratio, across signatures a ratio of each run to its signature's median. ``p_value``:
    how unlikely a change this large is from run-to-run noise alone (``noise``, fraction)."""

    run_a: RunRecord
    run_b: RunRecord
    change: float
    p_value: float | None
    noise: float | None
    same_signature: bool
    differences: tuple[Difference, ...]
    runs_used: int

    def to_json(self) -> dict[str, Any]:
        return {"run_a": self.run_a.to_json(), "run_b": self.run_b.to_json(),
                "change": round(self.change, 6), "p_value": self.p_value, "noise": self.noise,
                "same_signature": self.same_signature, "runs_used": self.runs_used,
                "differences": [d.to_json() for d in self.differences]}


def _day(t: float) -> str:
    try:
        return f"{datetime.fromtimestamp(t, UTC):%Y-%m-%d}"
    except (ValueError, OverflowError, OSError):
        return f"{t:.0f}"


def _fmt_p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _summary(label: str, e: Effect | None) -> str:
    if e is None:
        return f"{label}: never varies within a signature in the history, cannot be tested"
    word = "slower" if e.change > 0 else "faster"
    return (f"{label}: {abs(e.change) * 100:.1f} % {word} ({e.n_with} runs with, {e.n_without} "
            f"without, {_fmt_p(e.p_value)})")


def whatchanged(runs: Sequence[RunRecord], run_a: str, run_b: str) -> WhatChanged:
    by_id = {r.run_id: r for r in runs}
    missing = [x for x in (run_a, run_b) if x not in by_id]
    if missing:
        raise DataError(f"run(s) not in the history: {', '.join(missing)}")
    a, b = by_id[run_a], by_id[run_b]
    panel = make_panel(runs)
    same = a.signature == b.signature
    sig_runs = [r for r in panel.runs if r.signature == b.signature]
    if same:
        delta = b.log_cost - a.log_cost
    else:
        med = {s: float(np.median([r.log_cost for r in panel.runs if r.signature == s]))
               for s in (a.signature, b.signature)}
        delta = (b.log_cost - med[b.signature]) - (a.log_cost - med[a.signature])
    noise = p = None
    if len(sig_runs) >= 5:
        sigma = robust_sigma(np.array([r.log_cost for r in sig_runs]))
        noise = math.expm1(sigma)
        from scipy import stats

        p = float(2.0 * stats.norm.sf(abs(delta) / (sigma * math.sqrt(2.0))))
    index = {r.run_id: i for i, r in enumerate(panel.runs)}
    n = len(panel.runs)
    diffs: list[tuple[str, str, str, str, np.ndarray, str]] = []
    if not same:
        diffs.append(("signature", "signature", a.signature, b.signature, np.zeros(0), "signature"))
    for key in sorted(set(a.attrs) | set(b.attrs)):
        va, vb = a.attrs.get(key, frozenset()), b.attrs.get(key, frozenset())
        if va == vb:
            continue
        for v in sorted(vb - va):
            x = np.fromiter((v in r.attrs.get(key, ()) for r in panel.runs), dtype=float, count=n)
            diffs.append(("attr", key, " ".join(sorted(va)) or "(missing)", " ".join(sorted(vb)) or "(missing)",
                          x, f"runs with {key} {v}"))
        for v in sorted(va - vb):
            x = np.fromiter((v not in r.attrs.get(key, ()) for r in panel.runs), dtype=float, count=n)
            diffs.append(("attr", key, " ".join(sorted(va)) or "(missing)", " ".join(sorted(vb)) or "(missing)",
                          x, f"runs without {key} {v}"))
    on_node: dict[str, list[int]] = {}
    for r in panel.runs:
        for nd in r.nodes:
            on_node.setdefault(nd, []).append(index[r.run_id])
    added = sorted(set(b.nodes) - set(a.nodes))
    removed = sorted(set(a.nodes) - set(b.nodes))
    for kind, nodes in (("node_added", added), ("node_removed", removed)):
        for nd in nodes[:MAX_NODE_TESTS]:
            x = np.zeros(n)
            x[on_node.get(nd, [])] = 1.0
            if kind == "node_removed":
                x = 1.0 - x
            label = f"runs on {nd}" if kind == "node_added" else f"runs not on {nd}"
            diffs.append((kind, nd, "yes" if kind == "node_removed" else "no",
                          "yes" if kind == "node_added" else "no", x, label))
    real_change = p is not None and p < 0.05
    # the recent window (from the earlier of the two runs on): a node that went bad last week is
    # diluted over a whole history: the recent effect is kept when it is significant and larger
    # (p-values doubled: Bonferroni over the two windows)
    k = int(np.searchsorted(panel.t, min(a.time, b.time), side="left"))
    recent = make_panel(panel.runs[k:]) if k > 0 and n - k >= MIN_RECENT_RUNS else None
    out: list[Difference] = []
    xs: dict[int, np.ndarray] = {}
    for kind, key, va_s, vb_s, x, label in diffs:
        xs[len(out)] = x
        eff = fe_effect(panel, x) if x.size else None
        since = None
        if recent is not None and x.size:
            eff_r = fe_effect(recent, x[k:])
            if eff_r is not None and (eff is None or (eff_r.p_value < RECENT_ALPHA
                                                      and abs(eff_r.change) > abs(eff.change))):
                eff, since = eff_r, float(recent.t[0])
            if eff is not None:
                eff = dataclasses.replace(eff, p_value=min(1.0, 2.0 * eff.p_value))
        if since is not None:
            label = f"{label} (since {_day(since)})"
        explains = None
        if eff is not None and abs(delta) > 1e-9 and real_change:
            explains = math.log1p(eff.change) / delta
        summary = (f"different signatures ({a.signature} vs {b.signature}): compared to each "
                   "signature's median" if kind == "signature" else _summary(label, eff))
        out.append(Difference(kind, key, va_s, vb_s, eff, explains, summary, since=since))

    def score(d: Difference) -> tuple[int, float, float]:
        if d.effect is None:
            return (2, 1.0, 0.0)
        # a change within noise has no direction to agree with: rank by evidence alone
        agrees = not real_change or (d.explains is not None and d.explains > 0)
        return (0 if agrees else 1, d.effect.p_value, -abs(d.effect.change))

    order = sorted(range(len(out)), key=lambda i: score(out[i]))
    # the leading candidates fitted together: a node that only looks guilty because it carried the
    # new driver loses its effect net of the driver, and drops below it
    top = [i for i in order[:JOINT_TOP] if out[i].effect is not None and xs[i].size]
    if len(top) >= 2:
        joint = fe_joint(panel, np.column_stack([xs[i] for i in top]))
        for i, e in zip(top, joint, strict=True):
            out[i] = dataclasses.replace(out[i], joint=e)

        def jscore(i: int) -> tuple[int, float]:
            e = out[i].joint
            if e is None:
                return (2, 1.0)
            agrees = not real_change or (math.log1p(e.change) * delta > 0)
            return (0 if agrees and e.p_value < 0.05 else 1, e.p_value)

        order = sorted(order[:JOINT_TOP], key=jscore) + order[JOINT_TOP:]
    ranked = [dataclasses.replace(out[i], rank=r + 1) for r, i in enumerate(order)]
    return WhatChanged(a, b, math.expm1(delta), p, noise, same, tuple(ranked), n)

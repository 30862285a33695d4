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
from minutiae.analyses.whatchanged.stats import Effect, Panel, fe_effect, fe_joint, make_panel
from minutiae.errors import DataError
from minutiae.history.record import RunRecord

#: nodes differing between the two runs that we test one by one (largest jobs differ on thousands)
MAX_NODE_TESTS = 4096
#: runs needed after the earlier of the two runs to test the recent window as well
MIN_RECENT_RUNS = 30
RECENT_ALPHA = 0.01
#: leading candidates fitted jointly
JOINT_TOP = 8
#: a candidate's effect is significant below this p-value (after the window doubling)
SIGNIFICANT = 0.05
#: p-value of the observed change below which it has a direction (|z| > 1)
DIRECTED_P = 0.32


@dataclass(frozen=True, slots=True)
class Difference:
    """One thing that differs. ``kind``: ``attr`` (software/config), ``node_added`` (B used it, A
    did not), ``node_removed``, ``signature``. ``effect``: what B's side of it does to step time over
    the whole history (None: fewer than 3 runs of signatures that ran both with and without it, so the history
    cannot tell).
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
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"run_a": self.run_a.to_json(), "run_b": self.run_b.to_json(),
                "change": round(self.change, 6), "p_value": self.p_value, "noise": self.noise,
                "same_signature": self.same_signature, "runs_used": self.runs_used,
                "note": self.note,
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
        # fe_effect: no signature has it both on and off, or fewer than 3 runs in those that do
        return (f"{label}: cannot be tested: the history has fewer than 3 runs of a signature "
                "that ran both with and without it")
    word = "slower" if e.change > 0 else "faster"
    return (f"{label}: {abs(e.change) * 100:.1f} % {word} ({e.n_with} runs with, {e.n_without} "
            f"without, {_fmt_p(e.p_value)})")


def _observed(panel: Panel, a: RunRecord, b: RunRecord) -> tuple[float, float | None,
                                                                  float | None]:
    """(log change B vs A, run-to-run noise, p-value of the change against that noise)."""
    if a.signature == b.signature:
        delta = b.log_cost - a.log_cost
    else:
        med = {s: float(np.median([r.log_cost for r in panel.runs if r.signature == s]))
               for s in (a.signature, b.signature)}
        delta = (b.log_cost - med[b.signature]) - (a.log_cost - med[a.signature])
    sig_runs = [r for r in panel.runs if r.signature == b.signature]
    if len(sig_runs) < 5:
        return delta, None, None
    from scipy import stats

    sigma = robust_sigma(np.array([r.log_cost for r in sig_runs]))
    return delta, math.expm1(sigma), float(2.0 * stats.norm.sf(abs(delta) / (sigma * math.sqrt(2.0))))


#: (kind, key, A's side, B's side, indicator, runs with the key unknown, label, the indicator
#: "every node of the run had B's side" (a speed-up needs all nodes; empty for others))
_Cand = tuple[str, str, str, str, np.ndarray, np.ndarray, str, np.ndarray]


def _attr_candidates(panel: Panel, a: RunRecord, b: RunRecord) -> list[_Cand]:
    """One candidate per attribute that differs: "the run has B's side of it" (B's new values,
    else not A's old ones); runs whose value is missing are unknown, not "A's side"."""
    n = len(panel.runs)
    out: list[_Cand] = []
    for key in sorted(set(a.attrs) | set(b.attrs)):
        va, vb = a.attrs.get(key, frozenset()), b.attrs.get(key, frozenset())
        if va == vb:
            continue
        added, removed = sorted(vb - va), sorted(va - vb)
        if added:
            x = np.fromiter((any(v in r.attrs.get(key, ()) for v in added) for r in panel.runs),
                            dtype=float, count=n)
            label = f"runs with {key} {' '.join(added)}"
        else:
            x = np.fromiter((not any(v in r.attrs.get(key, ()) for v in removed)
                             for r in panel.runs), dtype=float, count=n)
            label = f"runs without {key} {' '.join(removed)}"
        miss = np.fromiter((not r.attrs.get(key) for r in panel.runs), dtype=float, count=n)
        x_all = np.fromiter((bool(r.attrs.get(key)) and r.attrs.get(key, frozenset()) <= vb
                             for r in panel.runs), dtype=float, count=n) if vb else np.zeros(0)
        out.append(("attr", key, " ".join(sorted(va)) or "(missing)",
                    " ".join(sorted(vb)) or "(missing)", x * (1 - miss), miss, label, x_all))
    return out


def _node_candidates(panel: Panel, a: RunRecord, b: RunRecord) -> list[_Cand]:
    n = len(panel.runs)
    on_node: dict[str, list[int]] = {}
    for i, r in enumerate(panel.runs):
        for nd in r.nodes:
            on_node.setdefault(nd, []).append(i)
    out: list[_Cand] = []
    none = np.zeros(n)
    for kind, nodes in (("node_added", sorted(set(b.nodes) - set(a.nodes))),
                        ("node_removed", sorted(set(a.nodes) - set(b.nodes)))):
        for nd in nodes[:MAX_NODE_TESTS]:
            x = np.zeros(n)
            x[on_node.get(nd, [])] = 1.0
            if kind == "node_removed":
                x = 1.0 - x
            label = f"runs on {nd}" if kind == "node_added" else f"runs not on {nd}"
            out.append((kind, nd, "yes" if kind == "node_removed" else "no",
                        "yes" if kind == "node_added" else "no", x, none, label, np.zeros(0)))
    return out


def _effect(panel: Panel, x: np.ndarray, miss: np.ndarray) -> Effect | None:
    """The indicator's within-signature effect, runs with the key unknown on a level of their own
    (left out of this estimate, kept in the fit)."""
    if not miss.any():
        return fe_effect(panel, x)
    if fe_effect(panel, x) is None:
        return None
    return fe_joint(panel, np.column_stack([x, miss]))[0]


def _tier(e: Effect | None, delta: float, directed: bool) -> int:
    """0: significant and the same sign as the change (any sign when the change is smaller than
    one noise sigma: it has no direction); 1: significant, opposite sign; 2: not significant;
    3: untestable."""
    if e is None:
        return 3
    if e.p_value >= SIGNIFICANT:
        return 2
    agrees = not directed or math.log1p(e.change) * delta > 0
    return 0 if agrees else 1


def whatchanged(runs: Sequence[RunRecord], run_a: str, run_b: str) -> WhatChanged:
    by_id = {r.run_id: r for r in runs}
    missing = [x for x in (run_a, run_b) if x not in by_id]
    if missing:
        raise DataError(f"run(s) not in the history: {', '.join(missing)}")
    a, b = by_id[run_a], by_id[run_b]
    panel = make_panel(runs)
    same = a.signature == b.signature
    delta, noise, p = _observed(panel, a, b)
    real_change = p is not None and p < 0.05
    # a change of at least one noise sigma has a direction a cause must share
    directed = abs(delta) > 0.005 if p is None else p < DIRECTED_P
    cands: list[_Cand] = [] if same else [
        ("signature", "signature", a.signature, b.signature, np.zeros(0), np.zeros(0), "signature",
         np.zeros(0))]
    cands += _attr_candidates(panel, a, b) + _node_candidates(panel, a, b)
    # the recent window (from the earlier of the two runs on): a node that went bad last week is
    # diluted over a whole history: the recent effect is kept when it is significant and larger
    # (p-values doubled: Bonferroni over the two windows)
    n = len(panel.runs)
    k = int(np.searchsorted(panel.t, min(a.time, b.time), side="left"))
    recent = make_panel(panel.runs[k:]) if k > 0 and n - k >= MIN_RECENT_RUNS else None
    per_kind = {kind: sum(c[0] == kind for c in cands) for kind in {c[0] for c in cands}}
    made = [_difference(panel, recent, k, c, a, b, delta, real_change, per_kind[c[0]])
            for c in cands]
    out = [d for d, _ in made]
    used = [u for _, u in made]
    def first(i: int) -> tuple[int, float, float]:
        e = out[i].effect
        return (_tier(e, delta, directed), e.p_value if e else 1.0, -abs(e.change) if e else 0.0)

    order = sorted(range(len(out)), key=first)
    order = _joint_rerank(panel, out, cands, used, order, delta, directed, per_kind)
    ranked = tuple(dataclasses.replace(out[i], rank=r + 1) for r, i in enumerate(order))
    best = min((d.effect.p_value for d in ranked if d.effect), default=None)
    note = ""
    if best is None or best >= SIGNIFICANT:
        note = ("nothing that differs is significant" + (f" (best {_fmt_p(best)})" if best is not None
                                                         else "") +
                ": the change is noise, or its cause is not recorded in the history")
    return WhatChanged(a, b, math.expm1(delta), p, noise, same, ranked, n, note)


def _either(panel: Panel, x: np.ndarray, miss: np.ndarray, x_all: np.ndarray,
            ) -> tuple[Effect | None, np.ndarray]:
    """The effect through any node (how a slowdown reaches a synchronous job) or, when it is
    better supported, through all of them (how a speed-up does); p doubled for the choice."""
    e = _effect(panel, x, miss)
    if not x_all.size or not (x_all != x).any():
        return e, x
    e2 = _effect(panel, x_all, miss)
    if e2 is None or (e is not None and e.p_value <= e2.p_value):
        return (e if e is None else dataclasses.replace(e, p_value=min(1.0, 2 * e.p_value))), x
    return dataclasses.replace(e2, p_value=min(1.0, 2 * e2.p_value)), x_all


def _difference(panel: Panel, recent: Panel | None, k: int, c: _Cand, a: RunRecord,
                b: RunRecord, delta: float, real_change: bool, tested: int,
                ) -> tuple[Difference, np.ndarray]:
    """One candidate's effect; p-values Bonferroni-corrected over the candidates of its kind
    (a job that moved to 500 other nodes is 500 tests: one of them is bound to look guilty)."""
    kind, key, va_s, vb_s, x, miss, label, x_all = c
    eff, used = _either(panel, x, miss, x_all) if x.size else (None, x)
    since = None
    if recent is not None and x.size:
        xr, xr_all = x[k:], (x_all[k:] if x_all.size else x_all)
        eff_r, used_r = _either(recent, xr, miss[k:], xr_all)
        if eff_r is not None and (eff is None or (eff_r.p_value < RECENT_ALPHA
                                                  and abs(eff_r.change) > abs(eff.change))):
            eff, since = eff_r, float(recent.t[0])
            used = x_all if used_r is xr_all and x_all.size else x
        if eff is not None:
            eff = dataclasses.replace(eff, p_value=min(1.0, 2.0 * eff.p_value))
    if eff is not None and tested > 1:
        eff = dataclasses.replace(eff, p_value=min(1.0, eff.p_value * tested))
    if since is not None:
        label = f"{label} (since {_day(since)})"
    explains = None
    if eff is not None and abs(delta) > 1e-9 and real_change:
        explains = math.log1p(eff.change) / delta
    summary = (f"different signatures ({a.signature} vs {b.signature}): compared to each "
               "signature's median" if kind == "signature" else _summary(label, eff))
    return Difference(kind, key, va_s, vb_s, eff, explains, summary, since=since), used


def _joint_rerank(panel: Panel, out: list[Difference], cands: list[_Cand], used: list[np.ndarray],
                  order: list[int], delta: float, directed: bool,
                  per_kind: dict[str, int]) -> list[int]:
    """The leading candidates fitted together: a node that only looks guilty because it carried
    the new driver loses its effect net of the driver, and drops below it."""
    top = [i for i in order[:JOINT_TOP] if out[i].effect is not None and used[i].size]
    if len(top) < 2:
        return order
    joint = fe_joint(panel, np.column_stack([used[i] for i in top]))
    for i, e in zip(top, joint, strict=True):
        if e is not None:  # the same correction over the candidates of its kind
            e = dataclasses.replace(e, p_value=min(1.0, e.p_value * per_kind[cands[i][0]]))
        out[i] = dataclasses.replace(out[i], joint=e)

    def key(i: int) -> tuple[int, float]:
        e = out[i].joint if out[i].joint is not None else out[i].effect
        tier = _tier(e, delta, directed)
        # significance overall and net of the others must agree to lead
        tier = max(tier, _tier(out[i].effect, delta, directed))
        return (tier, e.p_value if e else 1.0)

    return sorted(order[:JOINT_TOP], key=key) + order[JOINT_TOP:]

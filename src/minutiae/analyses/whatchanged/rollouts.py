"""Fleet attribution: was a rollout (a version changing on a set of nodes over time) the cause of
a change in speed, across every job that touched those nodes? (pure)

Each rollout becomes a run-level exposure: ``any`` (some node of the run had the new version when
it ran: how a synchronous job feels a slowdown) and ``all`` (every node had it: how it gains a
speed-up). All rollouts are fitted jointly with signature fixed effects
(:func:`minutiae.analyses.whatchanged.stats.fe_joint`), so two rollouts that overlapped in time are
told apart by the nodes they touched. Without a rollouts file, rollouts are inferred from the
runs' own attribute columns (every version first seen after the start of the history).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minutiae.analyses.whatchanged.badnodes import BAD_NODES, BadNodeParams, runs_kept
from minutiae.analyses.whatchanged.groups import GroupSplit, label_of, split_rollout
from minutiae.analyses.whatchanged.rule import RULE, CauseRule
from minutiae.analyses.whatchanged.stats import (
    Effect,
    Membership,
    Panel,
    fe_joint,
    make_panel,
    membership,
)
from minutiae.history.record import STACK_KEYS, RunRecord
from minutiae.history.rollouts import Rollout

WEEK = 7 * 86400.0
#: signatures (best supported first) given a per-signature hint column
MAX_HINT_SIGNATURES = 40
#: family-wise rate for the per-signature hints
HINT_ALPHA = 0.001
#: smallest effect shown in the per-signature hint (fraction)
MIN_EFFECT = 0.005


@dataclass(frozen=True, slots=True)
class RolloutVerdict:
    """``effect``: step-time change of exposed runs (fraction, + = slower) net of the other
    rollouts; ``exposure``: ``any`` or ``all`` (see ``_prefer_all``); ``by_signature``: a *hint*,
    signatures whose runs with the rollout differ significantly from their runs without it
    (Bonferroni over rollouts × signatures; a change that only hurts one model shows here while
    the fleet-wide effect is diluted) — within one signature this is confounded with the
    signature's own changes at the same time, so it never makes ``cause``; ``overlap``: runs on the
    smaller side (with or without the rollout) on days when both kinds ran — the evidence that
    separates the rollout from everything else that changed that week; ``cause``: the fleet-wide
    effect is significant after Bonferroni over rollouts, at least a floor, and rests on an
    overlap of enough runs (``rule.CauseRule``); ``gpu_hours_per_week``: GPU-hours
    the change costs (+) or saves (−) per week over the exposed runs since the rollout started
    (None when runs lack GPU counts or durations); ``runs_exposed``: runs that met it;
    ``groups``: when the rollout changed some signature groups and not others (``groups.py``),
    the split, and ``cause`` also holds when its pooled effect on the hit groups passes the same
    tests as a fleet-wide one (``rule.py``); ``missing``: runs whose version column was empty
    (left out of this rollout's estimate, kept for the others); ``hit_overlap``: the overlap
    of the hit groups' runs alone (0 without a partial split)."""

    name: str
    attr: str
    old: str
    new: str
    start: float
    nodes: int
    exposure: str
    effect: Effect | None
    cause: bool
    gpu_hours_per_week: float | None
    runs_exposed: int
    by_signature: tuple[tuple[str, Effect], ...] = ()
    overlap: int = 0
    groups: GroupSplit | None = None
    missing: int = 0
    hit_overlap: int = 0

    def summary(self) -> str:
        """``NCCL 2.23.4: +3.0 % on 6 of 12 signatures (moe-*), 0 on the rest`` or the fleet-wide
        effect."""
        name = f"{self.attr} {self.new}"
        if self.groups is not None:
            return self.groups.text(name)
        if self.effect is None:
            return f"{name}: untestable (fewer than 3 runs of a signature with and without it)"
        return f"{name}: {self.effect.change * 100:+.1f} % fleet-wide"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "attr": self.attr, "old": self.old, "new": self.new,
                "start": self.start, "nodes": self.nodes, "exposure": self.exposure,
                "effect": self.effect.to_json() if self.effect else None, "cause": self.cause,
                "gpu_hours_per_week": None if self.gpu_hours_per_week is None
                else round(self.gpu_hours_per_week, 2),
                "runs_exposed": self.runs_exposed, "overlap": self.overlap,
                "signatures": [{"signature": sig, **e.to_json()} for sig, e in self.by_signature],
                "groups": self.groups.to_json() if self.groups else None,
                "missing": self.missing, "summary": self.summary()}


def _exposure_from_nodes(panel: Panel, mem: Membership, ro: Rollout) -> tuple[np.ndarray, np.ndarray]:
    at = np.full(len(mem.names), np.inf)
    for nd, t in ro.at.items():
        if nd in mem.names:
            at[mem.names[nd]] = t
    on = (at[mem.node] <= panel.t[mem.run]).astype(float)
    hits = np.bincount(mem.run, weights=on, minlength=len(panel.runs))
    has = mem.per_run > 0
    return ((hits > 0) & has).astype(float), ((hits == mem.per_run) & has).astype(float)


def infer_rollouts(runs: Sequence[RunRecord]) -> list[Rollout]:
    """Rollouts implied by the software columns (driver, CUDA, NCCL, kernel, firmware, image):
    each version first seen after the earliest value of its attribute (node times unknown: ``at``
    is empty, ``start`` is the first run with it). Config columns are not rollouts."""
    first: dict[tuple[str, str], float] = {}
    for r in sorted(runs, key=lambda r: r.time):
        for k, vals in r.attrs.items():
            if k not in STACK_KEYS:
                continue
            for v in vals:
                first.setdefault((k, v), r.time)
    out = []
    for k in sorted({k for k, _ in first}):
        seq = sorted((t, v) for (kk, v), t in first.items() if kk == k)
        for (_, prev), (t, v) in zip(seq[:-1], seq[1:], strict=True):
            out.append(Rollout(k, prev, v, t, t, {}))
    return out


def _exposures(panel: Panel, ros: Sequence[Rollout],
               ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Per rollout: runs exposed through any node, through all nodes, and runs whose version
    field is empty (unknown, not "old": they get their own level in the fits)."""
    n = len(panel.runs)
    anys, alls, missing = [], [], []
    mem: Membership | None = None
    for ro in ros:
        if ro.at and any(r.nodes for r in panel.runs):
            mem = mem or membership(panel)
            a, b = _exposure_from_nodes(panel, mem, ro)
            miss = np.zeros(n)
        else:
            a = np.fromiter((ro.new in r.attrs.get(ro.attr, ()) for r in panel.runs), dtype=float, count=n)
            b = np.fromiter((r.attrs.get(ro.attr, frozenset()) == {ro.new} for r in panel.runs),
                            dtype=float, count=n)
            miss = np.fromiter((not r.attrs.get(ro.attr) for r in panel.runs), dtype=float, count=n)
        anys.append(a)
        alls.append(b)
        missing.append(miss)
    return anys, alls, missing


def attribute_rollouts(runs: Sequence[RunRecord], rollouts: Sequence[Rollout] | None = None,
                       rule: CauseRule = RULE, bad_nodes: BadNodeParams | None = BAD_NODES,
                       ) -> list[RolloutVerdict]:
    """Test every rollout as a cause (``rollouts`` None: inferred from attribute columns).
    ``bad_nodes``: the fleet-wide effects leave out the runs that drew a bad node in its bad
    weeks, found net of the rollouts (``badnodes.py``; None: they are kept)."""
    panel = make_panel(runs)
    ros = list(rollouts) if rollouts is not None else infer_rollouts(panel.runs)
    if not ros:
        return []
    anys, alls, missing = _exposures(panel, ros)
    keep, fpanel = runs_kept(panel, [*anys, *alls, *missing], bad_nodes)
    n = len(panel.runs)
    nuis = np.column_stack([m for m in missing if m.any()]) if any(m.any() for m in missing) \
        else np.zeros((n, 0))
    fit_any = fe_joint(fpanel, np.column_stack([*anys, nuis])[keep])[:len(ros)]
    fit_all = fe_joint(fpanel, np.column_stack([*alls, nuis])[keep])[:len(ros)]
    t_end = float(panel.t.max())
    hours = np.array([r.gpu_hours() if r.gpu_hours() is not None else np.nan for r in panel.runs])
    chosen: list[np.ndarray] = []
    effects: list[Effect | None] = []
    for i in range(len(ros)):
        use_all = _prefer_all(fit_any[i], fit_all[i])
        chosen.append(alls[i] if use_all else anys[i])
        effects.append(fit_all[i] if use_all else fit_any[i])
    xmat = np.column_stack(chosen)
    sig_names = sorted({r.signature for r in panel.runs})
    # the group split also nets out each run's slow-node penalty: big jobs draw more nodes, so a
    # slow node looks like an effect on the big-job group
    group_nuis = np.column_stack([nuis, _node_penalty(panel)])
    out = []
    splits = _greedy_splits(panel, xmat, group_nuis, anys, alls, rule)
    sig_of = np.array([r.signature for r in panel.runs])
    hits = {j: _held(sp, xs, sig_of) for j, (sp, xs) in splits.items()}
    for i, ro in enumerate(ros):
        x = chosen[i]
        extra = [h for j, cols in hits.items() if j != i for h in cols]
        # net of the other rollouts' group effects: NCCL's hit on MoE models is not a driver
        # rollout's that went out the same week
        eff = effects[i] if not extra else fe_joint(
            fpanel, np.column_stack([xmat, nuis, *extra])[keep])[i]
        overlap = _overlap(panel, x)
        main = rule.fleet_cause(eff, overlap, len(ros))
        by_sig = _per_signature(panel, np.column_stack([xmat, nuis]), i, sig_names, len(ros))
        shown, x_split = splits.get(i, (None, x))
        split = shown if shown is not None and shown.partial else None  # uneven: fleet-wide
        cause, cost_eff, cost_mask, hit_overlap = main, eff, np.ones(len(x), bool), 0
        if split is not None and split.hit_effect is not None:
            in_hit = np.isin(sig_of, np.array(split.hit_signatures))
            hit_overlap = _overlap(panel, x_split * in_hit)
            cause = main or rule.group_cause(split, hit_overlap, len(ros))
            cost_eff, cost_mask = split.hit_effect, in_hit
            if not by_sig:  # the hint: each hit signature with its group's effect
                group_of = dict(split.hit)
                first = {r.signature: r for r in reversed(panel.runs)}
                by_sig = [(sg, group_of[label_of(first[sg], split.grouping)])
                          for sg in split.hit_signatures]
        weeks = max((t_end - ro.start) / WEEK, 1.0 / 7.0)
        x_cost = x if split is None else x_split
        cost = None if cost_eff is None else _cost(hours, x_cost, cost_mask, cost_eff.change, weeks)
        use_all = x is alls[i]
        out.append(RolloutVerdict(ro.name, ro.attr, ro.old, ro.new, ro.start, len(ro.at),
                                  "all" if use_all else "any", eff, cause, cost,
                                  int((x > 0).sum()), tuple(by_sig), overlap, shown,
                                  int(missing[i].sum()), hit_overlap))
    return sorted(out, key=lambda v: (not v.cause, -(abs(v.effect.change) if v.effect else 0.0)))


def _best_split(panel: Panel, xmat: np.ndarray, i: int, nuis: np.ndarray, x_any: np.ndarray,
                x_all: np.ndarray, rule: CauseRule) -> tuple[GroupSplit | None, np.ndarray]:
    """The group split under the exposure that fits its mechanism (a slowdown through *any*
    node, a speed-up needing *all*): the fleet-wide choice of exposure can be the wrong one for a
    rollout that only hits some groups (its fleet-wide effect is near zero)."""
    best: tuple[GroupSplit | None, np.ndarray] = (None, x_any)
    for x, slower in ((x_any, True), (x_all, False)):
        m = xmat.copy()
        m[:, i] = x
        sp = split_rollout(panel, m, i, xmat.shape[1], nuis, rule.het_alpha, rule.group_p)
        if sp is None or sp.hit_effect is None or (sp.hit_effect.change > 0) != slower:
            continue
        if best[0] is None or _strength(sp, rule) > _strength(best[0], rule):
            best = (sp, x)
    return best


def _greedy_splits(panel: Panel, xmat: np.ndarray, nuis: np.ndarray, anys: list[np.ndarray],
                   alls: list[np.ndarray], rule: CauseRule,
                   ) -> dict[int, tuple[GroupSplit, np.ndarray]]:
    """Group splits accepted strongest first, each refitted net of the group effects of those
    accepted before it: two rollouts that went out together cannot both take one's effect."""
    first = {i: _best_split(panel, xmat, i, nuis, anys[i], alls[i], rule)
             for i in range(xmat.shape[1])}
    sig_of = np.array([r.signature for r in panel.runs])
    cands = {i: (sp, x) for i, (sp, x) in first.items() if sp is not None and _strength(sp, rule) > 0}
    order = _joint_order(panel, xmat, nuis, cands, sig_of)
    accepted: dict[int, tuple[GroupSplit, np.ndarray]] = {}
    for i in order:
        sp, xs = first[i]
        if accepted:
            held = [h for a, x in accepted.values() for h in _held(a, x, sig_of)]
            sp, xs = _best_split(panel, xmat, i, np.column_stack([nuis, *held]), anys[i],
                                 alls[i], rule)
        if sp is not None and _strength(sp, rule) > 0:
            accepted[i] = (sp, xs)
    return accepted


def _joint_order(panel: Panel, xmat: np.ndarray, nuis: np.ndarray,
                 cands: dict[int, tuple[GroupSplit, np.ndarray]], sig_of: np.ndarray) -> list[int]:
    """Candidate splits, strongest first by |t| of their hit column fitted jointly with every
    other candidate's: when two rollouts' splits claim the same signatures (a -3 % kernel
    rollout's *any* exposure takes up NCCL's +2 % on MoE models when each is fitted alone), the
    exposures decide which one owns the effect, not which was fitted first."""
    if len(cands) < 2:
        return list(cands)
    cols = [xmat[:, j] for j in range(xmat.shape[1]) if j not in cands]
    for sp, x in cands.values():
        hit = np.isin(sig_of, np.array(sp.hit_signatures))
        cols += [x * hit, x * ~hit]
    fit = fe_joint(panel, np.column_stack([*cols, nuis]))
    base = xmat.shape[1] - len(cands)
    t = {i: _t(fit[base + 2 * k]) for k, i in enumerate(cands)}
    return sorted(cands, key=lambda i: -t[i])


def _t(e: Effect | None) -> float:
    return 0.0 if e is None else abs(math.log1p(e.change)) / max(e.se, 1e-9)


def _held(sp: GroupSplit, x: np.ndarray, sig_of: np.ndarray) -> list[np.ndarray]:
    """The columns that net a split out of the other rollouts' fits: its hit signatures, and
    the rest too when it moved them as well (a fleet-wide change of uneven size)."""
    hit = np.isin(sig_of, np.array(sp.hit_signatures))
    return [x * hit] if sp.partial else [x * hit, x * ~hit]


def _strength(sp: GroupSplit, rule: CauseRule) -> float:
    """|t| of the pooled hit effect, when it reaches the group floor (else 0)."""
    e = sp.hit_effect
    if e is None or abs(e.change) < rule.group_min_effect:
        return 0.0
    return _t(e)


def _node_penalty(panel: Panel) -> np.ndarray:
    """Each run's slow-node penalty (ln units; ``analyses.regress.nodes``), 0 without nodes."""
    if not any(r.nodes for r in panel.runs):
        return np.zeros(len(panel.runs))
    from minutiae.analyses.regress.nodes import node_penalties

    pen = node_penalties(panel.runs).penalty
    return np.array([pen.get(r.run_id, 0.0) for r in panel.runs])


def _overlap(panel: Panel, x: np.ndarray) -> int:
    on = np.bincount(panel.d, weights=(x > 0).astype(float), minlength=panel.n_bins)
    tot = np.bincount(panel.d, minlength=panel.n_bins)
    mixed = (on > 0) & (on < tot)
    return int(min(on[mixed].sum(), (tot - on)[mixed].sum()))


def _prefer_all(ea: Effect | None, el: Effect | None) -> bool:
    """Which exposure explains the runs: a slowdown reaches a synchronous job through *any* node,
    a speed-up needs *all* of them. Prefer the fit whose sign matches its mechanism; if both or
    neither do, the one with the larger |t|."""
    if el is None:
        return False
    if ea is None:
        return True
    ok_any, ok_all = ea.change > 0, el.change < 0
    if ok_any != ok_all:
        return ok_all
    return abs(math.log1p(el.change)) / el.se > abs(math.log1p(ea.change)) / ea.se


def _cost(hours: np.ndarray, x: np.ndarray, mask: np.ndarray, change: float, weeks: float) -> float | None:
    """GPU-hours per week the change costs over the exposed runs in ``mask``."""
    sel = (x > 0) & mask
    if np.isnan(hours[sel]).any():
        return None
    frac = change / (1.0 + change)   # share of an exposed run's time due to the change
    return float((hours[sel] * x[sel]).sum() * frac / weeks)


def _per_signature(panel: Panel, xmat: np.ndarray, i: int, sigs: list[str], n_rollouts: int,
                   ) -> list[tuple[str, Effect]]:
    """Rollout ``i`` split into one column per signature (others kept fleet-wide)."""
    x = xmat[:, i]
    labels = np.array([r.signature for r in panel.runs])
    support = []
    for sg in sigs:
        m = labels == sg
        on = x[m] > 0
        n_on, n_off = int(on.sum()), int((~on).sum())
        if n_on >= 3 and n_off >= 3:
            support.append((min(n_on, n_off), sg, m))
    support = sorted(support, key=lambda s: -s[0])[:MAX_HINT_SIGNATURES]
    cols = [x * m for _, _, m in support]
    names = [sg for _, sg, _ in support]
    if len(names) < 2:       # one signature: the fleet-wide effect already is that signature's
        return []
    others = np.delete(xmat, i, axis=1)
    fit = fe_joint(panel, np.column_stack([others, *cols]))[others.shape[1]:]
    alpha = HINT_ALPHA / (n_rollouts * len(names))
    return [(sg, e) for sg, e in zip(names, fit, strict=True)
            if e is not None and e.p_value < alpha and abs(e.change) >= MIN_EFFECT]

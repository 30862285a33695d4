"""Rollouts that hit some models: a rollout's effect estimated per signature group (pure).

A rollout (an NCCL release, say) often slows only one kind of job (MoE models) and leaves the
rest alone; fitted fleet-wide its effect is diluted below "cause". Here the rollout's exposure
column is split by each *grouping* of the runs, each group its own column in the joint
two-way fixed-effects fit (the other rollouts kept fleet-wide):

- ``family``: the signature's leading word (``moe-8x22b-bf16`` -> ``moe``);
- ``size``: the run's scale (GPUs, else nodes);
- every configuration attribute (not a software version) with 2-12 values, e.g. a parallel
  layout or model-type column.

Runs whose label is empty are a column of their own, never reported: a missing field removes
the run from that grouping's estimate, not from the fit. The grouping whose group effects differ
most (Wald test of equal effects, Bonferroni over groupings and rollouts) is kept when that test
is significant; its groups whose own effect is significant (``CauseRule.group_p``), of the
strongest group's sign and at least half its size are the hit groups, the rest are pooled into
one "rest" estimate. Whether that makes the rollout a cause is decided on the pooled hit effect
(``rule.py``: the fleet-wide test, Bonferroni also over groupings, leave-one-signature-out, a
floor of its own).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from minutiae.analyses.whatchanged.rule import RULE
from minutiae.analyses.whatchanged.stats import Effect, Panel, fe_joint
from minutiae.history.record import STACK_KEYS, RunRecord

MAX_VALUES = 12
#: the rest of the groups "moved too" (a fleet-wide change of uneven size) below this p
REST_P = 0.05
_WORD = re.compile(r"[-_/.: ]")


@dataclass(frozen=True, slots=True)
class GroupSplit:
    """``grouping``: what split the runs (``family``, ``size`` or an attribute); ``hit``: the
    groups the rollout changed, with their effects; ``hit_effect``: the pooled effect over the
    hit groups; ``rest``: the pooled effect over the other groups (None when no run of them
    met the rollout); ``signatures``/``hit_signatures``: signatures that met the rollout, and
    those of them in hit groups; ``p_heterogeneity``: the Wald test of equal group effects;
    ``p_robust``: the largest p-value of the pooled hit effect with any one hit signature left
    out (1.0 with fewer than two): a change of one signature's own code at the time of the
    rollout is not a group effect; ``tested``: groupings tried (the cause test's Bonferroni
    factor); ``partial``: False when the rest changed significantly the same way (a fleet-wide
    change of uneven size: said as it is, tested and netted out as a fleet-wide one)."""

    grouping: str
    hit: tuple[tuple[str, Effect], ...]
    hit_effect: Effect | None
    rest: Effect | None
    signatures: int
    hit_signatures: tuple[str, ...]
    p_heterogeneity: float
    p_robust: float = 1.0
    tested: int = 1
    partial: bool = True

    def text(self, name: str) -> str:
        if self.hit_effect is None:
            return f"{name}: no group effect"
        labels = ", ".join(f"{g}-*" if self.grouping == "family" else g for g, _ in self.hit)
        rest = ("0 on the rest" if self.rest is None or self.rest.p_value >= 0.05
                else f"{self.rest.change * 100:+.1f} % on the rest")
        return (f"{name}: {self.hit_effect.change * 100:+.1f} % on {len(self.hit_signatures)} of "
                f"{self.signatures} signatures ({labels}), {rest}")

    def to_json(self) -> dict[str, Any]:
        return {"grouping": self.grouping,
                "hit": [{"group": g, **e.to_json()} for g, e in self.hit],
                "hit_effect": self.hit_effect.to_json() if self.hit_effect else None,
                "rest": self.rest.to_json() if self.rest else None,
                "signatures": self.signatures, "hit_signatures": list(self.hit_signatures),
                "p_heterogeneity": self.p_heterogeneity, "p_robust": self.p_robust,
                "partial": self.partial}


def family(signature: str) -> str:
    return _WORD.split(signature, maxsplit=1)[0] or signature


def label_of(run: RunRecord, grouping: str) -> str:
    """The run's group under ``grouping`` ('' = unknown)."""
    if grouping == "family":
        return family(run.signature)
    if grouping == "size":
        return run.size
    return " ".join(sorted(run.attrs.get(grouping, ())))


def groupings(runs: Sequence[RunRecord]) -> dict[str, list[str]]:
    """name -> one label per run ('' = unknown) for every grouping with 2+ groups."""
    keys = ["family", "size", *sorted({k for r in runs for k in r.attrs if k not in STACK_KEYS})]
    out = {k: [label_of(r, k) for r in runs] for k in keys}
    return {k: v for k, v in out.items() if 2 <= len({x for x in v if x}) <= MAX_VALUES}


def _wald(effects: list[Effect]) -> float:
    if len(effects) < 2:
        return 1.0
    b = np.array([math.log1p(e.change) for e in effects])
    w = 1.0 / np.array([max(e.se, 1e-9) ** 2 for e in effects])
    mean = float((w * b).sum() / w.sum())
    chi2 = float((w * (b - mean) ** 2).sum())
    return float(stats.chi2.sf(chi2, len(effects) - 1))


def _split_fit(panel: Panel, others: np.ndarray, x: np.ndarray, labels: list[str],
               values: list[str]) -> list[Effect | None]:
    lab = np.array(labels)
    cols = [x * (lab == v) for v in values] + [x * (lab == "")]
    return fe_joint(panel, np.column_stack([others, *cols]))[others.shape[1]:-1]


def split_rollout(panel: Panel, xmat: np.ndarray, i: int, n_rollouts: int,
                  nuisance: np.ndarray | None = None, het_alpha: float = RULE.het_alpha,
                  group_p: float = RULE.group_p) -> GroupSplit | None:
    """The best grouping of rollout ``i``'s effect, or None when no grouping's effects differ
    (Wald p x groupings >= ``het_alpha``); a group is hit when its p < ``group_p``."""
    x = xmat[:, i]
    others = np.delete(xmat, i, axis=1)
    if nuisance is not None and nuisance.size:
        others = np.column_stack([others, nuisance])
    groups = groupings(panel.runs)
    if not groups:
        return None
    best: tuple[float, str, list[str], list[Effect | None]] | None = None
    for name, labels in groups.items():
        exposed = {lb for lb, on in zip(labels, x > 0, strict=True) if on and lb}
        values = sorted(exposed)
        if len(values) < 2:
            continue
        fits = _split_fit(panel, others, x, labels, values)
        p = _wald([e for e in fits if e is not None]) * len(groups)
        if best is None or p < best[0]:
            best = (p, name, values, fits)
    if best is None or best[0] >= het_alpha:
        return None
    p_het, name, values, fits = best
    known = [(v, e) for v, e in zip(values, fits, strict=True) if e is not None]
    if not known:
        return None
    top = min(known, key=lambda ve: ve[1].p_value)[1]
    hit = [(v, e) for v, e in known if e.p_value < group_p and e.change * top.change > 0
           and abs(e.change) >= max(abs(top.change) / 2, 0.005)]
    if not hit or len(hit) == len(known):
        return None
    labels = groups[name]
    lab = np.array(labels)
    hit_mask = np.isin(lab, [v for v, _ in hit])
    rest_mask = (~hit_mask) & (lab != "")
    pooled = fe_joint(panel, np.column_stack([others, x * hit_mask, x * rest_mask,
                                              x * (lab == "")]))[others.shape[1]:]
    sigs = {r.signature for r, on in zip(panel.runs, x > 0, strict=True) if on}
    hit_sigs = sorted({r.signature for r, on, h in zip(panel.runs, x > 0, hit_mask, strict=True)
                       if on and h})
    rest = pooled[1] if (x * rest_mask).any() else None
    if _moved_too(pooled[0], rest):  # said as it is, tested and netted out fleet-wide
        return GroupSplit(name, tuple(hit), pooled[0], rest, len(sigs), tuple(hit_sigs),
                          min(1.0, p_het), 1.0, len(groups), partial=False)
    return GroupSplit(name, tuple(hit), pooled[0], rest, len(sigs), tuple(hit_sigs),
                      min(1.0, p_het), _leave_one_out(panel, others, x, hit_mask, lab, hit_sigs),
                      len(groups))


def _moved_too(hit: Effect | None, rest: Effect | None) -> bool:
    """The rest changed significantly the same way: a fleet-wide change of uneven size, not one
    that hits some groups and leaves the others alone."""
    return (hit is not None and rest is not None and rest.p_value < REST_P
            and rest.change * hit.change > 0)


def _leave_one_out(panel: Panel, others: np.ndarray, x: np.ndarray, hit: np.ndarray,
                   lab: np.ndarray, hit_sigs: list[str]) -> float:
    if len(hit_sigs) < 2:
        return 1.0
    sig = np.array([r.signature for r in panel.runs])
    worst = 0.0
    for s in hit_sigs:
        out = sig == s
        fit = fe_joint(panel, np.column_stack([others, x * (hit & ~out), x * (~hit | out)]))
        e = fit[others.shape[1]]
        worst = max(worst, 1.0 if e is None else e.p_value)
    return worst

"""Localisation: from alarmed ranks to the GPU, node, link or leaf switch to blame.

Rules (documented in docs/stragglers.md):
- the node-level test (median of a node's ranks, ``stragglers_nodes``) alarms -> the node,
  unless fewer than 75 % of its ranks alarmed and the node's slowdown is under half its
  slowest alarmed GPU's (over thousands of steps one slow GPU moves the median of 8 enough
  for the slow test: that is the GPU's shadow, and the GPU is blamed);
- compute alarms on at least 75 % of a node's ranks (and at least two) -> the node;
  otherwise each alarmed rank -> its GPU;
- communication-only alarms: when at least half of a node's ranks alarm the node counts as
  comm-slow; comm-slow nodes covering at least 75 % (and at least two) of the job's nodes under
  one leaf switch -> the leaf; two or more comm-slow nodes whose leaf is unknown -> one suspect
  ``leaf:?[node,node,...]`` (scope leaf, leaf null: the path they share); other comm-slow
  nodes -> that node's link; single ranks -> the GPU's own link (NIC rail). A rank with a
  compute alarm is never also blamed on the network.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from minutiae.analyses.stragglers.held import Alarms
from minutiae.analyses.stragglers.types import Basis, Scope, Suspect

NODE_SHARE = 0.75
COMM_NODE_SHARE = 0.5
LEAF_SHARE = 0.75
#: a node alarm smaller than this share of its slowest alarmed GPU's is that GPU's shadow
ONE_GPU_SHARE = 0.5


class RankMeta:
    """Where each rank runs; node and leaf membership indexed once (locate runs per alarm)."""

    def __init__(self, ranks: np.ndarray, node: tuple[str | None, ...], gpu: np.ndarray,
                 leaf: tuple[str | None, ...]) -> None:
        self.ranks, self.node, self.gpu, self.leaf = ranks, node, gpu, leaf
        self.by_node: dict[str | None, list[int]] = defaultdict(list)
        for i, n in enumerate(node):
            self.by_node[n].append(i)
        self.leaf_nodes: dict[str, set[str]] = defaultdict(set)
        for n, members in self.by_node.items():
            lf = leaf[members[0]]
            if lf is not None and n is not None:
                self.leaf_nodes[lf].add(n)


@dataclass(frozen=True, slots=True)
class _Hit:
    i: int
    slowdown: float
    lo: float
    hi: float
    since: int
    detected: int
    detector: str
    score: float
    peak: float = float("nan")
    held: float = float("nan")
    after: float = float("nan")


def _hits(a: Alarms) -> dict[int, _Hit]:
    out = {}
    for j, i in enumerate(a.index.tolist()):
        m, se = float(a.mean_log_ratio[j]), float(a.se_log_ratio[j])
        out[i] = _Hit(i, float(np.expm1(m)), float(np.expm1(m - 1.96 * se)),
                      float(np.expm1(m + 1.96 * se)), int(a.since_step[j]),
                      int(a.detected_step[j]), ("fast", "slow", "shift")[int(a.detector[j])],
                      float(a.score[j]), float(np.expm1(a.peak_log_ratio[j])),
                      float(np.expm1(a.held_log_ratio[j])), float(np.expm1(a.after_log_ratio[j])))
    return out


def _suspect(meta: RankMeta, hits: list[_Hit], scope: Scope, component: str, basis: Basis,
             share: float, job_gpus: int) -> Suspect:
    worst = max(hits, key=lambda h: h.slowdown)
    slowdown = float(np.median([h.slowdown for h in hits]))
    if len(hits) == 1:
        lo, hi = worst.lo, worst.hi
    else:
        lo, hi = float(np.median([h.lo for h in hits])), float(np.median([h.hi for h in hits]))
    job = max(worst.slowdown, 0.0) * share
    i = worst.i
    node = meta.node[i]
    return Suspect(
        rank=int(meta.ranks[i]), node=node,
        gpu=int(meta.gpu[i]) if meta.gpu[i] >= 0 and scope in (Scope.GPU, Scope.LINK) else None,
        leaf=meta.leaf[i], scope=scope, component=component,
        ranks=tuple(sorted(int(meta.ranks[h.i]) for h in hits)), basis=basis,
        slowdown=slowdown, ci_low=lo, ci_high=hi, since_step=int(np.median([h.since for h in hits])),
        detected_step=min(h.detected for h in hits), detector=worst.detector,
        score=max(h.score for h in hits), job_slowdown=job, gpu_hours_per_day=job * job_gpus * 24,
        peak=float(np.median([h.peak for h in hits])),
        held=float(np.median([h.held for h in hits])),
        after=float(np.median([h.after for h in hits])))


def _gpu_label(meta: RankMeta, i: int, prefix: str) -> str:
    node = meta.node[i]
    if node is None:
        return f"rank:{int(meta.ranks[i])}"
    return f"{prefix}:{node}/{int(meta.gpu[i])}" if meta.gpu[i] >= 0 else f"{prefix}:{node}/rank{int(meta.ranks[i])}"


NodeAlarms = tuple[list[str], list[np.ndarray], Alarms]


def locate(meta: RankMeta, compute: Alarms, comm: Alarms | None, basis: Basis,
           shares: tuple[float, float], job_gpus: int,
           nodes: NodeAlarms | None = None) -> list[Suspect]:
    """Suspects, most expensive first. ``shares`` = (compute, comm) fraction of the step;
    ``nodes`` = the node-level test's alarms (node names, their rank indices, alarms)."""
    out: list[Suspect] = []
    chits = _hits(compute)
    done: set[int] = set()
    if nodes is not None:
        names, node_ranks, alarms = nodes
        for n_i, h in _hits(alarms).items():
            idx = node_ranks[n_i]
            inside = [chits[i] for i in idx.tolist() if i in chits]
            if (inside and len(inside) < NODE_SHARE * idx.size
                    and h.slowdown < ONE_GPU_SHARE * max(x.slowdown for x in inside)):
                continue  # the node's median moved by its one slow GPU: blame the GPU
            rep = max(inside, key=lambda x: x.slowdown).i if inside else int(idx[0])
            nh = _Hit(rep, h.slowdown, h.lo, h.hi, min([h.since] + [x.since for x in inside]),
                      min([h.detected] + [x.detected for x in inside]), h.detector, h.score,
                      h.peak, h.held, h.after)
            sus = _suspect(meta, [nh], Scope.NODE, f"node:{names[n_i]}", basis, shares[0],
                           job_gpus)
            out.append(replace(sus, ranks=tuple(sorted(int(meta.ranks[i]) for i in idx))))
            done.update(idx.tolist())
    for node in {meta.node[i] for i in chits if i not in done}:
        members = meta.by_node[node]
        hit = [chits[i] for i in members if i in chits]
        if node is not None and len(hit) >= 2 and len(hit) >= NODE_SHARE * len(members):
            out.append(_suspect(meta, hit, Scope.NODE, f"node:{node}", basis, shares[0], job_gpus))
            done.update(h.i for h in hit)
    for i, h in chits.items():
        if i not in done:
            out.append(_suspect(meta, [h], Scope.GPU, _gpu_label(meta, i, "gpu"), basis,
                                shares[0], job_gpus))
    if comm is not None:
        out += _locate_comm(meta, {i: h for i, h in _hits(comm).items() if i not in chits},
                            shares[1], job_gpus)
    out.sort(key=lambda s: (-s.gpu_hours_per_day, s.rank))
    return out


def _locate_comm(meta: RankMeta, hits: dict[int, _Hit], share: float,
                 job_gpus: int) -> list[Suspect]:
    out: list[Suspect] = []
    slow_nodes: dict[str, list[_Hit]] = {}
    for node in {meta.node[i] for i in hits}:
        members = meta.by_node[node]
        hit = [hits[i] for i in members if i in hits]
        if node is not None and hit and len(hit) >= COMM_NODE_SHARE * len(members):
            slow_nodes[node] = hit
    used: set[str] = set()
    for leaf in {meta.leaf[meta.by_node[n][0]] for n in slow_nodes}:
        if leaf is None:
            continue
        nodes = meta.leaf_nodes[leaf]
        slow = [n for n in nodes if n in slow_nodes]
        if len(slow) >= 2 and len(slow) >= LEAF_SHARE * len(nodes):
            hit = [h for n in slow for h in slow_nodes[n]]
            out.append(_suspect(meta, hit, Scope.LEAF, f"leaf:{leaf}", Basis.COMMUNICATION,
                                share, job_gpus))
            used.update(slow)
    unplaced = sorted(n for n in slow_nodes if n not in used and meta.leaf[meta.by_node[n][0]] is None)
    if len(unplaced) >= 2:  # no leaf switch known: one suspect, the set of nodes (a shared path)
        hit = [h for n in unplaced for h in slow_nodes[n]]
        sus = _suspect(meta, hit, Scope.LEAF, f"leaf:?[{','.join(unplaced)}]", Basis.COMMUNICATION,
                       share, job_gpus)
        out.append(replace(sus, gpu=None))
        used.update(unplaced)
    for node, hit in slow_nodes.items():
        if node not in used:
            out.append(_suspect(meta, hit, Scope.LINK, f"link:{node}", Basis.COMMUNICATION,
                                share, job_gpus))
            used.add(node)
    for i, h in hits.items():
        if meta.node[i] not in used:
            out.append(_suspect(meta, [h], Scope.LINK, _gpu_label(meta, i, "link"),
                                Basis.COMMUNICATION, share, job_gpus))
    return out

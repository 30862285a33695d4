"""Scoring slownodes against the independent fleet's truth (``telemetry_fleet``): which injected
faults a passive monitor can see (``observable``), and which of them the findings found, which
findings are false alarms, which gaps were reported UNKNOWN (``score``)."""

from __future__ import annotations

from dataclasses import dataclass

from minutiae.testing.telemetry_fleet import Fault, Fleet

__all__ = ["FINDS", "Score", "observable", "score"]


#: which finding metrics find which fault kinds
FINDS = {"thermal": ("thermal",), "power": ("power",), "clock": ("sm_clock",), "node": ("sm_clock",)}


@dataclass(frozen=True, slots=True)
class Score:
    found: tuple[Fault, ...]
    missed: tuple[Fault, ...]
    false_alarms: tuple[str, ...]
    gaps_reported: tuple[Fault, ...]
    gaps_missed: tuple[Fault, ...]
    delays_s: tuple[float, ...]  # per found fault: first matching episode start - fault start

    def line(self) -> str:
        n = len(self.found) + len(self.missed)
        g = len(self.gaps_reported) + len(self.gaps_missed)
        return (f"faults found {len(self.found)}/{n}, false alarms {len(self.false_alarms)}, "
                f"gaps/absent reported {len(self.gaps_reported)}/{g}")


def _hits(f: Fault, node: str, gpu: int | None, start: float, end: float) -> bool:
    return (node == f.node and (f.gpu is None or gpu is None or gpu == f.gpu)
            and start < f.end and end > f.start)


def score(faults: tuple[Fault, ...], findings: list[object], unknown: list[object],
          by_metric: bool = True) -> Score:
    """Match findings (``node, gpu, metric, start, end`` attributes) to the injected faults: a
    finding is a hit when it is on the fault's node (and GPU, for a GPU fault), overlaps its
    window and (``by_metric``) its metric is one that finds this kind; every other finding is a
    false alarm. Gap/absent faults must appear among ``unknown`` (same node/GPU, overlapping)."""
    slow = [f for f in faults if f.kind in FINDS]
    holes = [f for f in faults if f.kind not in FINDS]
    found, missed, delays = [], [], []
    used: set[int] = set()
    for f in slow:
        hit = [i for i, x in enumerate(findings)
               if _hits(f, x.node, x.gpu, x.start, x.end)  # type: ignore[attr-defined]
               and (not by_metric or x.metric in FINDS[f.kind])]  # type: ignore[attr-defined]
        used |= set(hit)
        if hit:
            found.append(f)
            delays.append(min(findings[i].start for i in hit) - f.start)  # type: ignore[attr-defined]
        else:
            missed.append(f)
    false = [f"{x.node}/{x.gpu}/{x.metric}@{x.start:.0f}" for i, x in enumerate(findings)  # type: ignore[attr-defined]
             if i not in used and not any(_hits(f, x.node, x.gpu, x.start, x.end) for f in slow)]  # type: ignore[attr-defined]
    rep = [f for f in holes if any(_hits(f, u.node, u.gpu, u.start, u.end) for u in unknown)]  # type: ignore[attr-defined]
    return Score(tuple(found), tuple(missed), tuple(false), tuple(rep),
                 tuple(f for f in holes if f not in rep), tuple(delays))


def observable(fleet: Fleet, min_samples: int = 6) -> tuple[Fault, ...]:
    """The faults a passive monitor of persistent slowness can see: those that changed the
    telemetry at ``min_samples`` consecutive sample times or more (30 min at 5 min, the
    analysis's ``--min-duration``; ``Fleet.effect``): a fault on an idle GPU changes nothing,
    nor does a clock ceiling above the clock a binding power cap already holds the GPU to (it
    shows only in the load's dips, a sample here and there). Gaps and absences always count."""
    return tuple(f for f, n in zip(fleet.faults, fleet.effect, strict=True) if n >= min_samples)

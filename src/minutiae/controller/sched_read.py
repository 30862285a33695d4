"""Reading scheduler states for a reconcile step (the controller caches them): the backend's
bulk ``states(nodes)`` when it declares ``BulkStates``, else ``state(node)`` one by one; with
``everything``, ``all_states()`` (every node the scheduler knows) when it declares
``ListsNodes`` (capabilities found once, ``Capabilities.of(backend)``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from minutiae.errors import BackendUnavailable, MinutiaeError
from minutiae.schedulers.base import Capabilities, NodeState, SchedulerBackend


@dataclass(frozen=True, slots=True)
class StatesRead:
    """``states`` read (None: the scheduler does not know the node), ``failed`` nodes whose
    state could not be read, ``known`` the fleet nodes the scheduler listed (None: not
    listed this time), ``unreachable`` whether the scheduler answered (None: not asked)."""

    states: dict[str, NodeState | None]
    failed: frozenset[str]
    known: frozenset[str] | None
    unreachable: bool | None = None


def read_states(backend: SchedulerBackend, caps: Capabilities, nodes: Sequence[str], *,
                everything: bool, in_fleet: Callable[[str], bool],
                problem: Callable[[str], None]) -> StatesRead:
    """States of ``nodes`` (plus the listed fleet with ``everything``); says what it could not
    read through ``problem``, never raises for a scheduler problem."""
    failed: set[str] = set()
    need = list(nodes)
    out: dict[str, NodeState | None] = {}
    known: frozenset[str] | None = None
    bulk = caps.bulk
    listing = caps.listing if everything else None
    if listing is not None or (need and bulk is not None):
        try:
            if listing is not None:
                got: dict[str, NodeState] = listing.all_states()
                known = frozenset(n for n in got if in_fleet(n))
                need = sorted(set(need) | known)
            else:
                assert bulk is not None
                got = bulk.states(need)
        except BackendUnavailable as exc:
            problem(f"scheduler unreachable, not acting this step: {exc}")
            return StatesRead({}, frozenset(need), None, True)
        except MinutiaeError as exc:
            problem(f"scheduler states unknown this step: {exc}")
            return StatesRead({}, frozenset(need), None, True)
        for n in need:
            out[n] = got.get(n)
            if n not in got:
                failed.add(n)
        if len(failed) < len(need) and failed:
            problem(f"scheduler does not know {len(failed)} reporting node(s): "
                    f"{', '.join(sorted(failed)[:5])}")
        return StatesRead(out, frozenset(failed), known, False)
    down: bool | None = None if not need else False
    for i, n in enumerate(need):
        try:
            out[n] = backend.state(n)
        except BackendUnavailable as exc:
            problem(f"scheduler unreachable, not acting this step: {exc}")
            failed.update(need[i:])
            down = True
            break
        except MinutiaeError as exc:
            problem(f"scheduler state of {n} unknown: {exc}")
            out[n] = None
            failed.add(n)
    return StatesRead(out, frozenset(failed), None, down)


def read_tolerances(caps: Capabilities, problem: Callable[[str], None]) -> dict[str, int] | None:
    """Jobs' own tolerance from the scheduler (Slurm: ``--comment minutiae:tolerance=N``) when
    the backend can tell; None: not known this time (keep the last values)."""
    read = caps.tolerances
    if read is None:
        return None
    try:
        return dict(read.job_tolerances())
    except MinutiaeError as exc:
        problem(f"job tolerances from the scheduler unknown this step: {exc}")
        return None

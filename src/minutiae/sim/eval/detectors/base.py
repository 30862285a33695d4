"""The eval detector contract and its registry.

A detector is one module in this package whose run function turns a dataset into detections,
registered in one line::

    @register("regress", what="...", needs=("runs.csv",), kinds=("regression",),
              requires=("minutiae.analyses.regress.detect:find_change_points",), order=60)

``needs``: the dataset parts it reads (names in :data:`PARTS`, layout: docs/dataset.md).
``kinds``: the finding kinds its detections carry (what a profile's ``explained_by`` may name),
or a function returning them when they come from a rule catalog. ``requires``: modules
("module" or "module:attribute") without which it is reported as not available, never
replaced. ``order``: its place in the reports. :func:`detectors` imports every module here.
Also here: the per-run context (policy, maintenance windows) and the active-condition tracker.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minutiae.errors import ConfigError
from minutiae.model import Finding
from minutiae.scoring.score import Detection
from minutiae.sim.dataset import (
    Dataset,
)
from minutiae.sim.world.plan import REBOOT_S

Run = Callable[["Context"], tuple[list[Detection], list[str], int]]
Kinds = tuple[str, ...] | Callable[[], Iterable[str]]

#: the dataset parts a detector may need (docs/dataset.md); ``timings``: timings/<job>.parquet
PARTS = frozenset({"meta.json", "fleet.csv", "jobs.csv", "maintenance.csv", "boots.csv",
                   "kern.log", "ib.csv", "telemetry.parquet", "timings", "runs.csv"})


@dataclass(frozen=True, slots=True)
class Detector:
    """One registered detector (see the module docstring for the fields)."""

    name: str
    what: str
    needs: tuple[str, ...]
    kinds: Kinds
    requires: tuple[str, ...]
    run: Run
    order: int = 100

    def finding_kinds(self) -> tuple[str, ...]:
        """The finding kinds it reports (a rule-driven detector's come from its catalog)."""
        return tuple(sorted(set(self.kinds if isinstance(self.kinds, tuple) else self.kinds())))


#: name -> detector, filled by :func:`register` as the modules are imported
REGISTRY: dict[str, Detector] = {}


def register(name: str, *, what: str, needs: Sequence[str], kinds: Kinds,
             requires: Sequence[str] = (), order: int = 100) -> Callable[[Run], Run]:
    """Register the decorated run function as detector ``name``."""
    unknown = sorted(set(needs) - PARTS)
    if unknown:
        raise ConfigError(f"eval detector {name!r}: unknown dataset parts {unknown} (known: {sorted(PARTS)})")
    if isinstance(kinds, str):
        raise ConfigError(f"eval detector {name!r}: kinds must be a tuple of kinds, not a string")

    def add(run: Run) -> Run:
        if name in REGISTRY and REGISTRY[name].run is not run:
            raise ConfigError(f"eval detector {name!r} registered twice")
        REGISTRY[name] = Detector(name, what, tuple(needs), kinds, tuple(requires), run, order)
        return run

    return add


def detectors() -> tuple[Detector, ...]:
    """Every detector module of this package imported; the registry in report order."""
    pkg = importlib.import_module(__package__ or "minutiae.sim.eval.detectors")
    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name != "base" and not mod.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
    return tuple(sorted(REGISTRY.values(), key=lambda d: (d.order, d.name)))


class Failure(str):
    """A note saying the analysis itself crashed on one input (a bug, not bad input): counted in
    ``DetectorResult.failed`` and named in its status, so a per-input catch never hides it."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class DetectorResult:
    """``available`` False: ``reason`` says which module is missing. ``inputs``: files or jobs
    read; ``notes``: inputs skipped and why (never silently); ``failed``: inputs on which the
    analysis crashed (``Failure`` notes; the status says how many)."""

    name: str
    what: str
    available: bool
    reason: str
    detections: tuple[Detection, ...] = ()
    inputs: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    failed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "what": self.what, "available": self.available,
                "reason": self.reason, "detections": len(self.detections), "inputs": self.inputs,
                "seconds": round(self.seconds, 3), "notes": list(self.notes[:20]),
                "notes_total": len(self.notes), "failed": self.failed}


@dataclass
class Context:
    ds: Dataset
    policy: Any = None
    maint: dict[str, list[float]] = field(default_factory=dict)

    def classify(self, f: Finding) -> tuple[bool, bool]:
        """(alarm, drain) for a finding, by the controller policy when it is available."""
        if self.policy is not None:
            rule = self.policy.rule_for(f)
            do = getattr(getattr(rule, "do", None), "value", "notify")
            if do == "ignore":
                return False, False
            return True, do == "drain"
        return True, f.action.drains

    def node_files(self, name: str, notes: list[str]) -> list[tuple[str, Path]]:
        """Every node's ``name`` file that exists, in fleet order; a missing one is a note."""
        found = []
        for node in self.ds.nodes:
            path = self.ds.node_dir(node) / name
            if path.is_file():
                found.append((node, path))
            else:
                notes.append(f"{path}: missing")
        return found

    def in_maintenance(self, node: str, t: float) -> bool:
        settle = float(self.ds.meta.get("sampling", {}).get("boot_settle_s", 180))
        return any(m <= t <= m + REBOOT_S + settle for m in self.maint.get(node, ()))

    def detection(self, name: str, node: str | None, t: float, f: Finding) -> Detection | None:
        alarm, drain = self.classify(f)
        if not alarm:
            return None
        if drain and node is not None and self.in_maintenance(node, t):
            drain = False
        basis = f.attrs.get("basis")  # timing analyses: what slowed (scored, docs/sim.md)
        return Detection(name, node, t, f.kind, f.severity, drain, f.code,
                         (f.message or "")[:200], basis if isinstance(basis, str) else None)


class _Active:
    """Counter findings are conditions: alarm when one becomes active, not while it stays."""

    def __init__(self) -> None:
        self.keys: set[tuple[str, str]] = set()

    def fresh(self, findings: Iterable[Finding], scope: set[str] | None = None,
              rules: set[str] | None = None) -> list[Finding]:
        """New findings; ``scope``: the components evaluated this time, ``rules``: the rules
        (None: all) — the others keep theirs."""
        cur = {(f.rule or f.kind, f.component or ""): f for f in findings}
        out = [f for k, f in cur.items() if k not in self.keys]
        kept = {k for k in self.keys if (scope is not None and k[1] not in scope)
                or (rules is not None and k[0] not in rules)}
        self.keys = kept | set(cur)
        return out


def _missing(requires: Sequence[str]) -> str | None:
    """Why a detector cannot run (a required module or attribute is missing), or None."""
    for need in requires:
        mod, _, attr = need.partition(":")
        try:
            m = importlib.import_module(mod)
        except ImportError as exc:
            return f"{mod} not available ({exc})"
        if attr and not hasattr(m, attr):
            return f"{mod}.{attr} not available"
    return None

"""The fault profile: TOML data (``profiles/default.toml``) validated into frozen records.

Every rate must cite its ``source``; every entry names its ``unit``. ``load_profile`` applies the
command line's overrides (``--rate-scale``, ``--rate CLASS=VALUE``) so that every rate can change.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from minutiae.errors import ConfigError
from minutiae.inputs import read_text
from minutiae.scoring.explain import Explains, explains_of_classes, profile_classes

#: a profile TOML larger than this is not one (the packaged default is ~20 KB)
PROFILE_LIMIT = 4 << 20

UNITS = frozenset({
    "per_1000_gpu_days", "per_1000_node_days", "per_1000_port_days", "fraction_of_nodes",
    "per_job", "per_fleet", "fraction_of_jobs",
})
SIGNATURES = frozenset({"kern.log", "ib", "telemetry", "timings", "runs"})
SEVERITIES = ("info", "warning", "error", "critical")
#: fractions (stragglers, lemons) are capped when a rate scale blows them up
MAX_FRACTION = 0.03


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One fault (or benign, ``harmful=False``) class of the profile."""

    cls: str
    rate: float
    unit: str
    source: str
    signature: tuple[str, ...]
    harmful: bool = True
    severity: str = "warning"
    expect_drain: bool = False
    crash: bool = False
    repair_hours: tuple[float, float] | None = None
    duration_s: tuple[float, float] | None = None
    slowdown: tuple[float, float] = (0.0, 0.0)
    multiplier: float = 1.0
    codes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Rollout:
    attr: str
    new: str
    at_day: float
    spread_hours: float
    effect: float
    signature: str
    source: str


@dataclass(frozen=True, slots=True)
class JobSignature:
    name: str
    step_s: float
    sizes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    description: str
    fleet: dict[str, Any]
    sampling: dict[str, float]
    jobs: dict[str, Any]
    signatures: tuple[JobSignature, ...]
    cost: dict[str, float]
    rollouts: tuple[Rollout, ...]
    faults: tuple[FaultSpec, ...]
    path: str
    explains: Explains = Explains({})    # finding kind -> classes it explains (scoring/explain.py)

    def spec(self, cls: str) -> FaultSpec:
        for f in self.faults:
            if f.cls == cls:
                return f
        raise ConfigError(f"{self.path}: no fault class {cls!r}")

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(f.cls for f in self.faults)


def _pair(where: str, value: Any, scale: float = 1.0) -> tuple[float, float]:
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int | float) for v in value) or value[0] > value[1] or value[0] < 0):
        raise ConfigError(f"{where}: expected [min, max] with 0 <= min <= max, got {value!r}")
    return (float(value[0]) * scale, float(value[1]) * scale)


def _fault(where: str, raw: dict[str, Any], harmful: bool) -> FaultSpec:
    for key in ("class", "rate", "unit", "source", "signature"):
        if key not in raw:
            raise ConfigError(f"{where}: missing {key!r}")
    cls = raw["class"]
    w = f"{where} ({cls})"
    if not isinstance(raw["rate"], int | float) or raw["rate"] < 0:
        raise ConfigError(f"{w}: rate must be a number >= 0")
    if raw["unit"] not in UNITS:
        raise ConfigError(f"{w}: unknown unit {raw['unit']!r} (one of {sorted(UNITS)})")
    if not str(raw["source"]).strip():
        raise ConfigError(f"{w}: every rate must cite its source")
    sig = raw["signature"]
    if not isinstance(sig, list) or not set(sig) <= SIGNATURES:
        raise ConfigError(f"{w}: signature must be a list out of {sorted(SIGNATURES)}")
    sev = raw.get("severity", "warning")
    if sev not in SEVERITIES:
        raise ConfigError(f"{w}: unknown severity {sev!r}")
    duration = None
    if "duration_minutes" in raw:
        duration = _pair(f"{w} duration_minutes", raw["duration_minutes"], 60.0)
    elif "duration_hours" in raw:
        duration = _pair(f"{w} duration_hours", raw["duration_hours"], 3600.0)
    repair = _pair(f"{w} repair_hours", raw["repair_hours"]) if "repair_hours" in raw else None
    known = {"class", "rate", "unit", "source", "signature", "severity", "expect_drain", "crash",
             "repair_hours", "duration_minutes", "duration_hours", "slowdown", "multiplier", "codes",
             "explained_by", "also_explained_by"}
    extra = set(raw) - known
    if extra:
        raise ConfigError(f"{w}: unknown keys {sorted(extra)}")
    return FaultSpec(
        cls=cls, rate=float(raw["rate"]), unit=raw["unit"], source=str(raw["source"]),
        signature=tuple(sig), harmful=harmful, severity=sev,
        expect_drain=bool(raw.get("expect_drain", False)), crash=bool(raw.get("crash", False)),
        repair_hours=repair, duration_s=duration,
        slowdown=_pair(f"{w} slowdown", raw["slowdown"]) if "slowdown" in raw else (0.0, 0.0),
        multiplier=float(raw.get("multiplier", 1.0)),
        codes=tuple(int(c) for c in raw.get("codes", ())),
    )


def _rollouts(raw: dict[str, Any], where: str) -> list[Rollout]:
    """The ``[[rollout]]`` entries, and the ``[rollouts]`` table's keys checked."""
    ro = raw.get("rollouts", {})
    extra = set(ro) - {"explained_by", "also_explained_by"} if isinstance(ro, dict) else {"(not a table)"}
    if extra:
        raise ConfigError(f"{where}: [rollouts]: unknown keys {sorted(extra)}")
    rollouts: list[Rollout] = []
    for i, r in enumerate(raw.get("rollout", [])):
        try:
            rollouts.append(Rollout(attr=r["attr"], new=str(r["new"]), at_day=float(r["at_day"]),
                                    spread_hours=float(r["spread_hours"]), effect=float(r["effect"]),
                                    signature=str(r.get("signature", "")), source=str(r["source"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where} [[rollout]] #{i + 1}: bad or missing {exc}") from None
        if rollouts[-1].attr not in ("driver", "kernel", "firmware", "nccl"):
            raise ConfigError(f"{where} [[rollout]] #{i + 1}: attr must be driver/kernel/firmware/nccl")
    return rollouts


def parse_profile(text: str, where: str) -> Profile:
    """Validate profile TOML text (pure); ``where`` names it in errors."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}") from None
    for table in ("profile", "fleet", "sampling", "jobs", "cost"):
        if not isinstance(raw.get(table), dict):
            raise ConfigError(f"{where}: missing [{table}] table")
    faults = [_fault(f"{where} [[fault]] #{i + 1}", f, True) for i, f in enumerate(raw.get("fault", []))]
    faults += [_fault(f"{where} [[benign]] #{i + 1}", f, False) for i, f in enumerate(raw.get("benign", []))]
    seen: set[str] = set()
    for f in faults:
        if f.cls in seen:
            raise ConfigError(f"{where}: fault class {f.cls!r} defined twice")
        seen.add(f.cls)
    rollouts = _rollouts(raw, where)
    sigs = []
    for s in raw["jobs"].get("signatures", []):
        try:
            sigs.append(JobSignature(str(s["name"]), float(s["step_s"]), tuple(int(x) for x in s["sizes"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where} [jobs] signatures: bad entry {s!r} ({exc})") from None
    if not sigs:
        raise ConfigError(f"{where}: [jobs] needs at least one signature")
    stages = int(raw["jobs"].get("pipeline_stages", 1))
    if len(raw["jobs"].get("stage_imbalance", [0.0] * stages)) != stages:
        raise ConfigError(f"{where}: [jobs] stage_imbalance must have pipeline_stages entries")
    for key in ("telemetry_interval_s", "ib_interval_s", "timing_interval_s"):
        v = raw["sampling"].get(key)
        if not isinstance(v, int | float) or v <= 0:
            raise ConfigError(f"{where}: [sampling] {key} must be a positive number")
    return Profile(
        name=str(raw["profile"].get("name", "unnamed")),
        description=str(raw["profile"].get("description", "")),
        fleet=dict(raw["fleet"]), sampling=dict(raw["sampling"]), jobs=dict(raw["jobs"]),
        signatures=tuple(sigs), cost={k: float(v) for k, v in raw["cost"].items()},
        rollouts=tuple(rollouts), faults=tuple(faults), path=where,
        explains=explains_of_classes(profile_classes(raw), where),
    )


def default_profile_text() -> str:
    return resources.files("minutiae.sim.world").joinpath("profiles/default.toml").read_text("utf-8")


#: benign units whose rate counts independent events (scaled by the noise scale)
EVENT_UNITS = frozenset({"per_1000_gpu_days", "per_1000_port_days", "per_1000_node_days"})


def load_profile(path: str | Path | None = None, *, rate_scale: float = 1.0,
                 noise_scale: float | None = None, rates: dict[str, float] | None = None) -> Profile:
    """Read and validate a profile (the packaged default when ``path`` is None), then apply the
    overrides: ``rate_scale`` multiplies every harmful rate (fractions are capped at 3 %);
    ``noise_scale`` (None: 1; ``minutiae sim``/``demo`` default it to the rate scale) multiplies the must-not-alarm events that
    have a rate (``per_1000_*`` units: application Xids, planned reboots) and the per-job
    probabilities below 1 (capped at 1: peermem teardown lines); the always-present properties
    of every job or of the fleet (``per_fleet``, and the per-job GC/sequence/stage effects at 1)
    stay what they are (their intensity is a ``[jobs]`` setting, not a rate). So a demo that
    multiplies the faults can multiply what must not alarm too, and precision is not overstated.
    ``rates`` sets named classes' rates outright (after scaling)."""
    if path is None:
        text, where = default_profile_text(), "minutiae/sim/world/profiles/default.toml"
    else:
        text, where = read_text(Path(path), limit=PROFILE_LIMIT, what="profile TOML"), str(path)
    prof = parse_profile(text, where)
    if rate_scale < 0:
        raise ConfigError(f"rate scale must be >= 0, got {rate_scale}")
    noise = 1.0 if noise_scale is None else noise_scale
    if noise < 0:
        raise ConfigError(f"noise scale must be >= 0, got {noise}")
    faults = []
    for f in prof.faults:
        rate = f.rate
        if f.harmful:
            rate = rate * rate_scale
        elif f.unit in EVENT_UNITS:
            rate = rate * noise
        elif f.unit == "per_job" and rate < 1.0:   # a probability per job (1: every job has it)
            rate = min(1.0, rate * noise)
        if f.unit == "fraction_of_nodes":
            rate = min(rate, MAX_FRACTION)
        faults.append(replace(f, rate=rate))
    for cls, rate in (rates or {}).items():
        idx = [i for i, f in enumerate(faults) if f.cls == cls]
        if not idx:
            raise ConfigError(f"--rate {cls}: no such fault class (one of {', '.join(prof.classes)})")
        if rate < 0:
            raise ConfigError(f"--rate {cls}: rate must be >= 0")
        faults[idx[0]] = replace(faults[idx[0]], rate=rate)
    return replace(prof, faults=tuple(faults))

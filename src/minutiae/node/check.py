"""One health check of one node: ``run_check(cfg, clock) -> NodeReport`` (stable API).

Called once by ``minutiae check`` (Slurm HealthCheckProgram) and every few seconds by the agent.
Sources are chosen by ``CheckConfig``; each check group becomes one ``CheckResult``:

- ``gpu``: NVML, or ``nvidia_smi_xml`` (XML or ``-q`` text capture) and/or ``dcgm`` when given;
- ``ib``: ``<sysfs_root>/class/infiniband``; ``pcie``: ``<sysfs_root>/bus/pci/devices``;
- ``ib`` from an ``ibstat``/``ibstatus`` capture instead, when ``ibstat`` is given;
- ``kernel_log``: ``kmsg`` (a file, or ``/dev/kmsg``) through the kernel-log rules and the
  log-count engine rules, reading only what is new since the previous cycle.

The node's uptime (``<proc_root>/uptime``) is fed to the counter rules as ``node.uptime_s`` (the
boot grace of ``ib.port-down``); an uptime that cannot be read is a note and means no grace.

A source that cannot be read makes its check UNKNOWN with the reason (never OK) and the others
still run. What a cycle remembers for the next one (previous counter values for rates, the
kernel-log cursor and its faults since boot, log-count engine state) is a ``CheckMemory``: kept
in ``state_file`` (one-shot runs), or passed as ``memory`` by a long-running caller.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minutiae.clock import Clock
from minutiae.errors import ConfigError, InputError, MinutiaeError
from minutiae.model import Action, CheckResult, Finding, Observation, Severity, Status
from minutiae.node.groups import (
    check_gpu,
    check_ib,
    check_kernel_log,
    check_pcie,
    counter_findings,
)
from minutiae.node.memory import CheckMemory
from minutiae.rules.counters.load import counter_rules
from minutiae.rules.counters.model import UPTIME, baseline_metrics

if TYPE_CHECKING:
    from minutiae.node.sources.nvml import NvmlApi

#: how long a counter value not seen again stays the baseline for rates (a source down, a port gone)
COUNTER_TTL_S = 24 * 3600.0

#: the check groups, in display order
CHECKS = ("gpu", "ib", "pcie", "kernel_log")

#: this machine's sysfs and procfs
SYS = Path("/sys")
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class CheckConfig:
    """Where to look. Defaults check this node; set paths to check captured data instead.

    ``kmsg=None`` skips the kernel-log check (the CLI does that when it is pointed at captures
    without ``--kmsg``). ``expected_gpus``/``expected_driver`` turn on the GPU-count and driver
    rules. ``nvml`` injects a ``pynvml``-like module (tests); ``use_nvml=False`` never loads it.
    ``checks`` limits the groups run (default: all of ``CHECKS``). ``ibstat`` (an ``ibstat`` or
    ``ibstatus`` capture) replaces sysfs for the IB check; ``nvlink_status`` (an ``nvidia-smi
    nvlink --status`` capture) adds NVLink link states to the GPU check, matched by UUID.
    ``proc_root`` is where ``uptime`` is read (the boot grace of the counter rules); left None
    it is ``/proc`` when ``sysfs_root`` is this machine's ``/sys`` and nowhere otherwise (a
    captured sysfs tree is never judged with this machine's uptime): see ``uptime_root``.
    """

    sysfs_root: Path = Path("/sys")
    kmsg: Path | None = Path("/dev/kmsg")
    nvidia_smi_xml: Path | None = None
    dcgm: str | None = None
    nvlink_status: Path | None = None
    ibstat: Path | None = None
    expected_gpus: int | None = None
    expected_driver: str | None = None
    state_file: Path | None = None
    node: str | None = None
    use_nvml: bool = True
    nvml: NvmlApi | None = None
    checks: tuple[str, ...] = CHECKS
    year: int | None = None
    proc_root: Path | None = None

    @property
    def uptime_root(self) -> Path | None:
        """Where the uptime is read: ``proc_root``; else ``/proc`` when checking this machine
        (``sysfs_root`` is ``/sys``); else None (no uptime, hence no boot grace)."""
        if self.proc_root is not None:
            return self.proc_root
        return PROC if self.sysfs_root == SYS else None


@dataclass(frozen=True, slots=True)
class NodeReport:
    """The health of one node at ``time``.

    ``status`` is the worst check status (CRITICAL > UNKNOWN > WARNING > OK: a known critical
    outranks "could not tell"); ``action`` is the largest action any finding needs (``none`` …
    ``inspect``); ``drain`` is true when that action is ``reset_gpu`` or more. ``observations``
    are the raw values (for the agent's metrics); ``notes`` are non-fatal remarks (state file,
    uptime). ``uptime_s`` is the node's seconds since boot the counter rules saw (None: not
    read, or unreadable — then no rule had a boot grace).
    """

    node: str
    time: float
    results: tuple[CheckResult, ...]
    observations: tuple[Observation, ...] = ()
    notes: tuple[str, ...] = ()
    uptime_s: float | None = None

    @property
    def status(self) -> Status:
        return Status.worst([r.status for r in self.results])

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for r in self.results for f in r.findings)

    @property
    def action(self) -> Action:
        return max((f.action for f in self.findings), default=Action.NONE)

    @property
    def drain(self) -> bool:
        return self.action.drains

    def result(self, check: str) -> CheckResult | None:
        return next((r for r in self.results if r.check == check), None)

    def reason(self) -> str | None:
        """A short reason for a scheduler: the distinct messages of the findings that need the
        node's action, worst first, e.g. ``Xid 79 (…FALLEN_OFF_THE_BUS) on GPU 0000:44:00.0``."""
        return reason_for(self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "time": self.time,
            "status": self.status.label,
            "exit_code": int(self.status),
            "action": self.action.label,
            "drain": self.drain,
            "reason": self.reason(),
            "checks": [r.to_json() for r in self.results],
            "notes": list(self.notes),
            "uptime_s": self.uptime_s,
        }


def run_check(cfg: CheckConfig, clock: Clock, *, memory: CheckMemory | None = None) -> NodeReport:
    """Run every configured check once. Never raises for a source problem: that source's check
    is UNKNOWN with the reason. ``memory`` carries counter values, the kernel-log cursor and
    the kernel-log findings between calls in-process (it is updated); without it,
    ``cfg.state_file`` (if any) is read before and written after the run."""
    from minutiae.node.memory_file import load_state, save_state

    now = clock.now()
    notes: list[str] = []
    mem = memory
    if mem is None:
        mem = CheckMemory()
        if cfg.state_file is not None:
            try:
                mem = load_state(cfg.state_file)
            except InputError as exc:
                notes.append(str(exc))

    groups: dict[str, tuple[list[Observation], CheckResult | None, list[str]]] = {}
    if "gpu" in cfg.checks:
        groups["gpu"] = check_gpu(cfg, now)
    if "ib" in cfg.checks:
        groups["ib"] = check_ib(cfg.sysfs_root, now, cfg.ibstat)
    if "pcie" in cfg.checks:
        groups["pcie"] = check_pcie(cfg.sysfs_root, now)

    all_obs = [o for obs, _, _ in groups.values() for o in obs]
    uptime = _uptime(cfg.uptime_root, notes)
    extra = {"node": {"expected_gpus": cfg.expected_gpus, "expected_driver": cfg.expected_driver,
                      UPTIME: uptime}}
    node = cfg.node or os.uname().nodename.split(".")[0]
    # parsed rule catalogs are cached beside the state file (one-shot runs start faster)
    cache_dir = cfg.state_file.parent if cfg.state_file is not None else None
    by_check, pending = counter_findings(all_obs, mem, now, extra, node, cache_dir)
    notes.extend(pending)

    results: list[CheckResult] = []
    for name, (obs, failed, problems) in groups.items():
        if failed is not None:
            results.append(failed)
            continue
        results.append(_result(name, by_check.get(name, []), problems, len(obs)))
    if "kernel_log" in cfg.checks and cfg.kmsg is not None:
        results.append(check_kernel_log(cfg.kmsg, cfg.year, mem, clock, node, cache_dir))

    # values a failed source did not deliver this cycle stay as the baseline for a while, so a
    # transient UNKNOWN does not cost the next cycle its rates; only the metrics that rates and
    # increases read are kept (a tenth of the values: the state file stays small)
    keep = baseline_metrics(counter_rules(cache_dir))
    fresh = {(o.component, o.metric): (float(o.value), now) for o in all_obs
             if o.metric in keep and isinstance(o.value, int | float) and not isinstance(o.value, bool)}
    kept = {k: v for k, v in mem.counters.items()
            if k[1] in keep and k not in fresh and now - v[1] <= COUNTER_TTL_S}
    mem.counters = {**kept, **fresh}
    if memory is None and cfg.state_file is not None:
        try:
            save_state(cfg.state_file, mem, now)
        except InputError as exc:
            notes.append(str(exc))
    return NodeReport(node, now, tuple(results), tuple(all_obs), tuple(notes), uptime)


def _uptime(root: Path | None, notes: list[str]) -> float | None:
    """The node's uptime from ``<root>/uptime``; None (and a note) when it cannot be read."""
    if root is None:
        return None
    from minutiae.node.sources.uptime.read import read_uptime

    try:
        return read_uptime(root)
    except MinutiaeError as exc:  # unknown uptime is no boot grace (never "healthy")
        notes.append(f"{exc}; no boot grace")
        return None


def reason_for(findings: Sequence[Finding]) -> str | None:
    """The distinct messages of the findings with the largest action, worst severity first (at
    most two, then ``(+N more)``); None when no finding needs any action."""
    action = max((f.action for f in findings), default=Action.NONE)
    if action is Action.NONE:
        return None
    worst = sorted((f for f in findings if f.action == action), key=lambda f: (-f.severity, f.kind))
    messages = list(dict.fromkeys(f.message for f in worst))
    more = len(messages) - 2
    return " / ".join(messages[:2]) + (f" (+{more} more)" if more > 0 else "")


def parse_checks(text: str | None) -> tuple[str, ...]:
    """``"gpu,ib"`` → ``("gpu", "ib")`` in display order; None → all. Raises ``ConfigError``."""
    if text is None:
        return CHECKS
    wanted = {c.strip() for c in text.split(",") if c.strip()}
    bad = sorted(wanted - set(CHECKS))
    if bad or not wanted:
        raise ConfigError(f"--checks: unknown {', '.join(bad) or '(none given)'} (known: {', '.join(CHECKS)})")
    return tuple(c for c in CHECKS if c in wanted)


def status_of(findings: Sequence[Finding]) -> Status:
    """info → OK, warning → WARNING, error/critical → CRITICAL."""
    worst = max((f.severity for f in findings), default=Severity.INFO)
    if worst >= Severity.ERROR:
        return Status.CRITICAL
    return Status.WARNING if worst == Severity.WARNING else Status.OK


def _result(name: str, findings: list[Finding], problems: list[str], observed: int) -> CheckResult:
    status = status_of(findings)
    reason = None
    if problems:
        reason = f"{len(problems)} value(s) unreadable: " + "; ".join(problems[:3])
        if status is not Status.CRITICAL:
            status = Status.UNKNOWN
    return CheckResult(name, status, tuple(findings), reason, observed)


__all__ = ["CHECKS", "CheckConfig", "CheckMemory", "NodeReport", "parse_checks", "reason_for", "run_check", "status_of"]

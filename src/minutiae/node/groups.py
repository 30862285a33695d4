"""The check groups behind ``run_check`` (sources → parsers → counter rules)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from minutiae.errors import MinutiaeError, SourceUnavailable
from minutiae.model import Action, CheckResult, Finding, Observation, Severity, Status
from minutiae.model.findings import Scalar
from minutiae.model.snapshot import Snapshot
from minutiae.node.memory import CheckMemory
from minutiae.rules.counters.load import counter_rules
from minutiae.rules.counters.model import context, judge

if TYPE_CHECKING:
    from minutiae.clock import Clock
    from minutiae.node.check import CheckConfig

Group = tuple[list[Observation], CheckResult | None, list[str]]

#: NVML's texts for NVML_ERROR_LIB_RM_VERSION_MISMATCH (18; pynvml's, then nvidia-smi's): the
#: user-space library and the kernel module disagree (upgraded without a reboot) — a node fault
NVML_VERSION_MISMATCH = ("NVML/RM version mismatch", "Driver/library version mismatch")


def _unknown(check: str, reason: str) -> CheckResult:
    return CheckResult(check, Status.UNKNOWN, (), reason, 0)


def _group(snap: Snapshot, now: float) -> Group:
    obs = [o if o.time is not None else Observation(o.source, o.component, o.metric, o.value, now)
           for o in snap.observations]
    return obs, None, [str(p) for p in snap.problems]


def check_gpu(cfg: CheckConfig, now: float) -> Group:
    """GPU observations from the captures given, or from NVML."""
    snaps: list[Snapshot] = []
    try:
        if cfg.nvidia_smi_xml is not None:
            from minutiae.node.sources.nvidia_smi.read import read_nvidia_smi_file

            snaps.append(read_nvidia_smi_file(cfg.nvidia_smi_xml))
        if cfg.dcgm is not None:
            from minutiae.node.sources.dcgm.read import read_dcgm

            snaps.append(read_dcgm(cfg.dcgm))
        if not snaps:
            from minutiae.node.sources.nvml import load_pynvml, read_nvml

            if not cfg.use_nvml:
                return [], _unknown("gpu", "no GPU source (NVML disabled, no capture given)"), []
            api = cfg.nvml if cfg.nvml is not None else load_pynvml()
            snaps.append(read_nvml(api, now))
    except SourceUnavailable as exc:
        if any(text in exc.reason for text in NVML_VERSION_MISMATCH):
            f = Finding("driver_mismatch", Severity.CRITICAL, Action.REBOOT,
                        f"NVML: {exc.reason} (driver upgraded without a reboot)", rule="nvml.init")
            return [], CheckResult("gpu", Status.CRITICAL, (f,), exc.reason, 0), []
        return [], _unknown("gpu", f"{exc.source}: {exc.reason}"), []
    except MinutiaeError as exc:
        return [], _unknown("gpu", str(exc)), []
    snap = snaps[0]
    for other in snaps[1:]:
        snap = snap.merged(other)
    if cfg.nvlink_status is not None:
        from minutiae.node.sources.nvidia_smi.parse_nvlink import by_uuid
        from minutiae.node.sources.nvidia_smi.read import read_nvlink_status_file

        try:
            snap = snap.merged(by_uuid(read_nvlink_status_file(cfg.nvlink_status), snap))
        except MinutiaeError as exc:
            return [], _unknown("gpu", str(exc)), []
    return _group(snap, now)


def check_ib(sysfs_root: Path, now: float, ibstat: Path | None = None) -> Group:
    """IB ports from sysfs, or from an ``ibstat``/``ibstatus`` capture when one is given."""
    try:
        if ibstat is not None:
            from minutiae.node.sources.ib.read_ibstat import read_ibstat_file

            return _group(read_ibstat_file(ibstat), now)
        from minutiae.node.sources.ib.read_sysfs import read_sysfs_ib

        return _group(read_sysfs_ib(sysfs_root, now), now)
    except SourceUnavailable as exc:
        return [], _unknown("ib", exc.reason), []
    except MinutiaeError as exc:
        return [], _unknown("ib", str(exc)), []


def check_pcie(sysfs_root: Path, now: float) -> Group:
    from minutiae.node.sources.pcie.read import read_sysfs_pcie

    try:
        snap = read_sysfs_pcie(sysfs_root, time=now)
    except SourceUnavailable as exc:
        return [], _unknown("pcie", exc.reason), []
    if not snap.observations and not snap.problems:
        note = f"no NVIDIA or Mellanox PCIe device with a link under {sysfs_root}/bus/pci/devices"
        return [], CheckResult("pcie", Status.OK, (), note, 0), []
    return _group(snap, now)


_CHECK_OF = {"gpu": "gpu", "node": "gpu", "ib": "ib", "pcie": "pcie"}
#: node-level rules that compare the driver with the PCIe bus belong to the gpu check


def counter_findings(
    observations: Sequence[Observation],
    memory: CheckMemory,
    now: float,
    extra: Mapping[str, Mapping[str, Scalar]],
    node: str = "localhost",
    cache_dir: Path | None = None,
) -> tuple[dict[str, list[Finding]], list[str]]:
    """Counter-rule findings grouped by check name, and notes (gated rules whose condition
    holds but has not held long enough yet). Rules with a gate (persistence, healthy delay,
    flapping) go through the check engine, their state kept in ``memory.gates``."""
    rules = counter_rules(cache_dir)
    verdicts = judge(rules, context(observations, memory.counters, now, extra))
    found = [v.finding() for v in verdicts if v.holds and v.rule.gate is None]
    notes: list[str] = []
    if any(r.gate is not None for r in rules):
        from minutiae.rules.counters.gate import gated_findings
        from minutiae.rules.engine.state import EngineState

        state = None
        if memory.gates:
            try:
                state = EngineState.from_dict(memory.gates)
            except MinutiaeError:
                notes.append("counter-rule timers were damaged in the state file; they start again")
        out = gated_findings(rules, verdicts, now, state, node)
        found.extend(out.findings)
        notes.extend(out.pending)
        memory.gates = out.state.to_dict() if any(out.state.rules.values()) else None
    by_check: dict[str, list[Finding]] = {}
    for f in found:
        prefix = (f.component or "node").split(":", 1)[0]
        by_check.setdefault(_CHECK_OF.get(prefix, prefix), []).append(f)
    return by_check, notes


def check_kernel_log(path: Path, year: int | None, memory: CheckMemory, clock: Clock,
                     node: str, cache_dir: Path | None = None) -> CheckResult:
    """Kernel-log findings since boot: the lines after ``memory.log_cursor`` are parsed through
    the kernel-log rules and merged into ``memory.log_findings`` (which this updates); the
    log-count engine rules (``log_counts.toml``: repeats within a window, flapping links) run
    over the new findings with their state kept in ``memory.engine``."""
    from minutiae.node.check import status_of
    from minutiae.node.sources.kernel_log.read_kmsg import read_kernel_log

    try:
        chunks, cursor, reset = read_kernel_log(path, memory.log_cursor)
    except SourceUnavailable as exc:
        return _unknown("kernel_log", exc.reason)
    if reset:
        memory.reset_log()
    new: list[Finding] = []
    if chunks:  # the parser and its catalogs are loaded only when there is something new
        try:
            from minutiae.node.sources.kernel_log.parse import parse_chunks
            from minutiae.rules.log_findings import findings_from_events
        except ImportError as exc:  # the kernel-log rules are not installed in this build
            return _unknown("kernel_log", f"kernel-log rules unavailable ({exc})")
        try:
            events = list(parse_chunks(chunks, year=year))
            new = list(findings_from_events(events))
        except MinutiaeError as exc:
            return _unknown("kernel_log", str(exc))
        memory.add_log_findings(new)
        memory.log_events += sum(c.count(b"\n") for c in chunks)  # lines scanned since boot
    memory.log_cursor = cursor
    counted: tuple[Finding, ...] = ()
    if new or memory.engine:
        try:
            counted = _log_counts(new, memory, clock, node, cache_dir)
        except MinutiaeError as exc:
            return _unknown("kernel_log", f"log-count rules: {exc}")
    findings = tuple(memory.log_findings) + counted
    return CheckResult("kernel_log", status_of(findings), findings, None, memory.log_events)


def _log_counts(new: Sequence[Finding], memory: CheckMemory, clock: Clock, node: str,
                cache_dir: Path | None = None) -> tuple[Finding, ...]:
    from minutiae.rules.engine.engine import Engine
    from minutiae.rules.engine.rules import shipped_engine_rules
    from minutiae.rules.engine.state import EngineState

    state = None
    if memory.engine:
        try:
            state = EngineState.from_json(memory.engine)
        except MinutiaeError:
            state = None  # damaged: counts start again
    rules = [r for r in shipped_engine_rules(cache_dir) if r.on == "finding"]
    engine = Engine(rules, clock=clock, node=node, state=state)
    engine.record(new)
    result = engine.evaluate()
    memory.engine = engine.state.to_json() if any(engine.state.rules.values()) else None
    return result.findings

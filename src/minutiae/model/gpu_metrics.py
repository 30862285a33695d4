"""Shared vocabulary of the GPU sources (NVML, ``nvidia-smi -q -x``, ``nvidia-smi -q``, DCGM).

Every GPU source emits the same metrics on component ``gpu:<pci>`` (``pci`` normalised by
``normalize_pci``, e.g. ``gpu:0000:19:00.0``) and node-level metrics on component ``node``:

=========================  ===========================================================
metric                      meaning
=========================  ===========================================================
name, uuid                  product name, GPU UUID (str)
driver_version              driver version (str; also on ``node``)
vbios_version               VBIOS version (str)
ecc_sbe_volatile            corrected ECC errors since driver load (SRAM + DRAM)
ecc_dbe_volatile            uncorrected ECC errors since driver load
ecc_sbe_aggregate           corrected ECC errors over the board's life
ecc_dbe_aggregate           uncorrected ECC errors over the board's life
remap_correctable           rows remapped for correctable errors
remap_uncorrectable         rows remapped for uncorrectable errors
remap_pending               a remap waits for a GPU reset (bool)
remap_failure               a remap failed: the board has run out of spare rows (bool)
retired_pages_sbe/_dbe      pages retired for multiple SBEs / a DBE (pre-Ampere)
retired_pages_pending       a retirement waits for a reboot (bool)
clock_event_reasons         NVML bitmask of clock-event (throttle) reasons, see REASONS
pstate                      performance state, 0 (P0, fastest) … 15
temperature_c               GPU core temperature
temperature_slowdown_c      temperature at which the board slows down (when known; newer
                            drivers give it as a margin to T.Limit: see ``TLimit``)
power_w, power_limit_w      board power draw and enforced limit
pcie_gen_current/_max       PCIe generation now and the maximum of the GPU
pcie_width_current/_max     PCIe lanes now and the maximum
pcie_replay                 PCIe replays since reset
nvlink_active_links         NVLink links up (NVML only)
nvlink_inactive_links       NVLink links that are supported but down
nvlink_errors               sum of NVLink replay + recovery + CRC errors over all links
reset_required              the driver says the GPU needs a reset (bool)
node: gpu_count             GPUs seen by the source
node: attached_gpus         GPUs the driver says are attached (nvidia-smi header)
=========================  ===========================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from minutiae.model.findings import Scalar
from minutiae.model.snapshot import SnapshotBuilder, leading_number, to_int

#: NVML clock-event reason bits (nvmlClocksEventReason*) and their names (XML tag suffixes).
REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}
#: ``nvidia-smi -q`` labels of the same reasons.
REASON_LABELS: dict[str, str] = {
    "Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "Display Clock Setting": "display_clocks_setting",
}


def reason_names(mask: int) -> list[str]:
    """Names of the bits set in an NVML clock-event-reason mask (unknown bits as hex)."""
    names = [name for name, bit in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS.values())
    if rest:
        names.append(f"0x{rest:x}")
    return names


_PCI = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def normalize_pci(bus_id: str) -> str | None:
    """``00000000:19:00.0`` / ``0000:19:00.0`` / ``19:00.0`` → ``0000:19:00.0`` (None if invalid)."""
    m = _PCI.match(bus_id.strip())
    if not m:
        return None
    domain = int(m.group(1) or "0", 16)
    if domain > 0xFFFF:
        return None
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def gpu_component(pci: str) -> str:
    return f"gpu:{pci}"


def _yes_no(text: str) -> bool | None:
    t = text.strip().lower()
    if t in ("yes", "active", "enabled", "true"):
        return True
    if t in ("no", "not active", "disabled", "false", "none"):
        return False
    return None


def _is_na(text: str | None) -> bool:
    if text is None:
        return True
    t = text.strip()
    # "Requested functionality has been deprecated" is what some drivers print instead of N/A
    return t in _NA or t.startswith("Requested functionality has been deprecated")


_NA = frozenset({"", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error"})


#: field extractors: metric -> (list of candidate paths (first present wins), converter)
Getter = Callable[[str], str | None]


def _number(text: str) -> float | None:
    return leading_number(text)


def _integer(text: str) -> int | None:
    t = text.strip()
    if len(t) in (2, 3) and t[0] == "P" and t[1:].isascii() and t[1:].isdigit():  # performance state "P0".."P15"
        return int(t[1:])
    v = to_int(text)
    if v is None:
        f = leading_number(text)
        v = int(f) if f is not None and f.is_integer() else None
    return v


@dataclass(frozen=True, slots=True)
class TLimit:
    """Where a capture gives temperatures as margins to the board's thermal limit (T.Limit;
    drivers from about R550 on Hopper and Blackwell): ``margin`` is the current distance below
    T.Limit, ``slowdown`` the slowdown point as a margin (``-2 C``: two degrees past T.Limit).
    The slowdown temperature is then ``temperature + margin - slowdown``: on the H200 of
    tests/data/h200 that is 38 + 49 - (-2) = 89 °C, what NVML's slowdown threshold returns."""

    temperature: tuple[str, ...]
    margin: tuple[str, ...]
    slowdown: tuple[str, ...]


def emit_gpu(
    b: SnapshotBuilder,
    comp: str,
    where: str,
    get: Getter,
    paths: Mapping[str, tuple[str, ...]],
    sums: Mapping[str, tuple[tuple[str, ...], ...]],
    reasons: Mapping[str, str | None],
    tlimit: TLimit | None = None,
) -> None:
    """Emit the common GPU metrics from one GPU section of a capture.

    ``get(path)`` returns the raw text at ``path`` or None. ``paths`` maps metric → candidate
    paths; ``sums`` maps an ECC metric → alternative groups of paths whose values are summed
    (the first group with a number wins); ``reasons`` maps reason name → raw Active/Not Active.
    A value that is present but neither a number nor N/A becomes a ``Problem`` naming the field.
    ``tlimit``: where to derive ``temperature_slowdown_c`` from when no path of it has a value.
    """
    emitted = {m for m, candidates in paths.items() if _emit_field(b, comp, where, get, m, candidates)}
    for metric, groups in sums.items():
        _emit_sum(b, comp, where, get, metric, groups)
    if reasons:
        _emit_reasons(b, comp, where, reasons)
    if tlimit is not None and "temperature_slowdown_c" not in emitted:
        slowdown = _tlimit_slowdown(get, tlimit)
        if slowdown is not None:
            b.add(comp, "temperature_slowdown_c", slowdown)


def _first_number(get: Getter, candidates: tuple[str, ...]) -> float | None:
    for path in candidates:
        raw = get(path)
        if not _is_na(raw):
            return _number(raw or "")
    return None


def _tlimit_slowdown(get: Getter, t: TLimit) -> float | None:
    values = [_first_number(get, c) for c in (t.temperature, t.margin, t.slowdown)]
    if any(v is None for v in values):
        return None
    temp, margin, slowdown = (float(v or 0.0) for v in values)
    return temp + margin - slowdown


def _emit_field(b: SnapshotBuilder, comp: str, where: str, get: Getter, metric: str,
                candidates: tuple[str, ...]) -> bool:
    """One metric from the first of its candidate paths that is present; whether it was."""
    raw = None
    used = ""
    for path in candidates:
        raw = get(path)
        if raw is not None:
            used = path
            break
    if raw is None or _is_na(raw):
        return False
    if metric in _STRINGS:
        b.add(comp, metric, raw.strip())
        return True
    conv: Callable[[str], Scalar] = (
        _yes_no if metric in _BOOLS else (_number if metric in _FLOATS else _integer))
    value = conv(raw)
    if value is None:
        b.problem(comp, f"{where}: {used}", f"not a {'yes/no' if metric in _BOOLS else 'number'}: {raw.strip()[:40]!r}")
        return False
    b.add(comp, metric, value)
    return True


def _emit_sum(b: SnapshotBuilder, comp: str, where: str, get: Getter, metric: str,
              groups: tuple[tuple[str, ...], ...]) -> None:
    """An ECC total: the first group of paths with any number, summed."""
    for group in groups:
        raws = [get(p) for p in group]
        if all(_is_na(r) for r in raws):
            continue
        bad = [p for p, r in zip(group, raws, strict=True) if not _is_na(r) and _integer(r or "") is None]
        if bad:
            b.problem(comp, f"{where}: {bad[0]}", f"not a number: {(get(bad[0]) or '').strip()[:40]!r}")
            return
        b.add(comp, metric, sum(_integer(r or "") or 0 for r in raws if not _is_na(r)))
        return


def _emit_reasons(b: SnapshotBuilder, comp: str, where: str,
                  reasons: Mapping[str, str | None]) -> None:
    """The clock-event reasons bitmask from Active/Not Active fields."""
    mask = 0
    seen = False
    for name, raw in reasons.items():
        if _is_na(raw):
            continue
        flag = _yes_no(raw or "")
        if flag is None:
            b.problem(comp, f"{where}: clock event reason {name}", f"not Active/Not Active: {raw!r}")
            continue
        seen = True
        if flag:
            mask |= REASONS[name]
    if seen:
        b.add(comp, "clock_event_reasons", mask)


_STRINGS = frozenset({"name", "uuid", "vbios_version", "driver_version"})
_BOOLS = frozenset({"remap_pending", "remap_failure", "retired_pages_pending", "reset_required"})
_FLOATS = frozenset({"temperature_c", "temperature_slowdown_c", "power_w", "power_limit_w"})

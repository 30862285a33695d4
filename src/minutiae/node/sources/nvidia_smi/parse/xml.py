"""``nvidia-smi -q -x`` XML (DTD v10–v13) → GPU observations (pure).

Handles both ECC layouts (``sram_*``/``dram_*`` since v11, ``single_bit``/``double_bit`` totals
before), ``clocks_event_reasons`` (v12+) and ``clocks_throttle_reasons`` (older), and
``gpu_power_readings`` or ``power_readings``. Metric names: ``minutiae.model.gpu_metrics``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET  # noqa: S405 - no entity expansion beyond expat's limits

from minutiae.errors import ParseError
from minutiae.model.gpu_metrics import (
    REASONS,
    TLimit,
    emit_gpu,
    gpu_component,
    normalize_pci,
)
from minutiae.model.snapshot import Snapshot, SnapshotBuilder, to_int

SOURCE = "nvidia-smi-xml"

PATHS: dict[str, tuple[str, ...]] = {
    "name": ("product_name",),
    "uuid": ("uuid",),
    "vbios_version": ("vbios_version",),
    "pstate": ("performance_state",),
    "pcie_gen_current": ("pci/pci_gpu_link_info/pcie_gen/current_link_gen",),
    "pcie_gen_max": ("pci/pci_gpu_link_info/pcie_gen/max_link_gen",),
    "pcie_width_current": ("pci/pci_gpu_link_info/link_widths/current_link_width",),
    "pcie_width_max": ("pci/pci_gpu_link_info/link_widths/max_link_width",),
    "pcie_replay": ("pci/replay_counter",),
    "temperature_c": ("temperature/gpu_temp",),
    "temperature_slowdown_c": ("temperature/gpu_temp_slow_threshold",),
    # drivers from about R535 write average and instant draws instead of power_draw; the average
    # (over 1 s) is what NVML's nvmlDeviceGetPowerUsage returns on Ampere and newer boards
    "power_w": ("gpu_power_readings/power_draw", "power_readings/power_draw",
                "gpu_power_readings/average_power_draw", "gpu_power_readings/instant_power_draw"),
    "power_limit_w": (
        "gpu_power_readings/current_power_limit",
        "power_readings/current_power_limit",
        "power_readings/power_limit",
    ),
    "reset_required": ("gpu_reset_status/reset_required",),
    "remap_correctable": ("remapped_rows/remapped_row_corr",),
    "remap_uncorrectable": ("remapped_rows/remapped_row_unc",),
    "remap_pending": ("remapped_rows/remapped_row_pending",),
    "remap_failure": ("remapped_rows/remapped_row_failure",),
    "retired_pages_sbe": ("retired_pages/multiple_single_bit_retirement/retired_count",),
    "retired_pages_dbe": ("retired_pages/double_bit_retirement/retired_count",),
    # older drivers (e.g. 430 on Kepler) write only <pending_blacklist>, as -q writes "Pending Page Blacklist"
    "retired_pages_pending": ("retired_pages/pending_retirement", "retired_pages/pending_blacklist"),
}


#: temperatures as margins to T.Limit (DTD v12+ on Hopper/Blackwell): ``gpu_metrics.TLimit``
TLIMIT = TLimit(temperature=("temperature/gpu_temp",), margin=("temperature/gpu_temp_tlimit",),
                slowdown=("temperature/gpu_temp_slow_tlimit_threshold",))


def _ecc(scope: str) -> dict[str, tuple[tuple[str, ...], ...]]:
    e = f"ecc_errors/{scope}"
    return {
        f"ecc_sbe_{scope}": (
            (f"{e}/sram_correctable", f"{e}/dram_correctable"),
            (f"{e}/single_bit/total",),
        ),
        f"ecc_dbe_{scope}": (
            (
                f"{e}/sram_uncorrectable",
                f"{e}/sram_uncorrectable_parity",
                f"{e}/sram_uncorrectable_secded",
                f"{e}/dram_uncorrectable",
            ),
            (f"{e}/double_bit/total",),
        ),
    }


SUMS = {**_ecc("volatile"), **_ecc("aggregate")}


def parse_nvidia_smi_xml(data: bytes | str, where: str = "nvidia-smi -q -x") -> Snapshot:
    """Parse one ``nvidia-smi -q -x`` document. Raises ``ParseError`` (naming ``where``) when the
    document is not well-formed XML or not an ``nvidia_smi_log``."""
    try:
        root = ET.fromstring(data)  # noqa: S314
    except ET.ParseError as exc:
        raise ParseError(f"not nvidia-smi XML ({exc})", where) from None
    except (ValueError, LookupError) as exc:  # str with an encoding declaration; unknown encoding
        raise ParseError(f"not nvidia-smi XML ({exc})", where) from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"root element is <{root.tag}>, expected <nvidia_smi_log>", where)
    b = SnapshotBuilder(SOURCE)
    driver = (root.findtext("driver_version") or "").strip()
    if driver:
        b.add("node", "driver_version", driver)
    attached = to_int(root.findtext("attached_gpus") or "")
    if attached is not None:
        b.add("node", "attached_gpus", attached)
    gpus = root.findall("gpu")
    b.add("node", "gpu_count", len(gpus))
    for i, gpu in enumerate(gpus):
        bus = gpu.get("id") or gpu.findtext("pci/pci_bus_id") or ""
        pci = normalize_pci(bus)
        if pci is None:
            b.problem("node", f"{where}: gpu[{i}]", f"invalid PCI bus id {bus!r}")
            continue
        comp = gpu_component(pci)
        if driver:
            b.add(comp, "driver_version", driver)
        reasons_el = gpu.find("clocks_event_reasons")
        prefix = "clocks_event_reason_"
        if reasons_el is None:
            reasons_el = gpu.find("clocks_throttle_reasons")
            prefix = "clocks_throttle_reason_"
        reasons: dict[str, str | None] = {}
        if reasons_el is not None:
            reasons = {n: reasons_el.findtext(prefix + n) for n in REASONS}

        def get(path: str, _g: ET.Element = gpu) -> str | None:
            return _g.findtext(path)

        emit_gpu(b, comp, f"{where}: gpu {pci}", get, PATHS, SUMS, reasons, TLIMIT)
    return b.build()

"""sysfs PCIe link attributes → observations on ``pcie:<address>`` (pure).

Input per device: ``{current_link_speed, current_link_width, max_link_speed, max_link_width,
class, vendor}`` as text (``None`` = unreadable). Metrics: ``speed_gts``/``max_speed_gts``
(GT/s: 2.5 gen1, 5 gen2, 8 gen3, 16 gen4, 32 gen5, 64 gen6), ``gen``/``max_gen``, ``width``/
``max_width`` (lanes), ``device_kind`` (``gpu``, ``nic``, ``nvswitch``, ``other``), ``vendor``.
``Unknown`` speed (link down or no link) becomes ``speed_gts = 0``. When the kernel exposes AER
statistics (``aer_dev_correctable``/``_fatal``/``_nonfatal``, Linux ≥ 4.19), their
``TOTAL_ERR_*`` lines become ``aer_correctable``, ``aer_fatal``, ``aer_nonfatal`` (counts since
boot, as seen by this device).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from minutiae.model.snapshot import SnapshotBuilder

SOURCE = "sysfs-pcie"
ATTRS = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width", "class", "vendor")
AER = {"aer_dev_correctable": ("aer_correctable", "TOTAL_ERR_COR"),
       "aer_dev_fatal": ("aer_fatal", "TOTAL_ERR_FATAL"),
       "aer_dev_nonfatal": ("aer_nonfatal", "TOTAL_ERR_NONFATAL")}
_SPEED = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")
_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}
VENDORS = {"0x10de": "nvidia", "0x15b3": "mellanox"}


def pcie_component(address: str) -> str:
    return f"pcie:{address}"


def parse_speed(text: str) -> float | None:
    """``'16.0 GT/s PCIe'`` → 16.0; ``'8 GT/s'`` → 8.0; ``'Unknown'`` → 0.0; garbage → None."""
    t = text.strip()
    if t.lower().startswith("unknown"):
        return 0.0
    m = _SPEED.match(t)
    return float(m.group(1)) if m else None


def device_kind(pci_class: str, vendor: str) -> str:
    """Classify by PCI class code: 0x0302/0x0300 display (GPU), 0x0200/0x0207 network/IB (NIC),
    0x0680 bridge-other from NVIDIA (NVSwitch)."""
    c = pci_class.strip().lower()
    v = vendor.strip().lower()
    if c.startswith(("0x0302", "0x0300")) and v == "0x10de":
        return "gpu"
    if c.startswith(("0x0200", "0x0207")):
        return "nic"
    if c.startswith("0x0680") and v == "0x10de":
        return "nvswitch"
    return "other"


def parse_aer(text: str) -> dict[str, int] | None:
    """``'Receiver Error 2\\nBad TLP 0\\n…\\nTOTAL_ERR_COR 2\\n'`` → ``{'Receiver Error': 2, …}``;
    None when a line is not ``<name> <count>``."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, count = line.strip().rpartition(" ")
        if not name or not (count.isascii() and count.isdigit()):
            return None
        out[name.strip()] = int(count)
    return out


def parse_pcie_device(b: SnapshotBuilder, address: str, files: Mapping[str, str | None], where: str) -> None:
    comp = pcie_component(address)
    cls = files.get("class") or ""
    vendor = files.get("vendor") or ""
    b.add(comp, "device_kind", device_kind(cls, vendor))
    if vendor.strip():
        b.add(comp, "vendor", vendor.strip().lower())
    for attr, metric in (("current_link_speed", "speed_gts"), ("max_link_speed", "max_speed_gts")):
        text = files.get(attr)
        speed = parse_speed(text) if text is not None else None
        if speed is None:
            b.problem(comp, f"{where}/{attr}", "unreadable" if text is None else f"not '<n> GT/s': {text.strip()[:40]!r}")
            continue
        b.add(comp, metric, speed)
        gen = _GEN.get(speed)
        if gen is not None:
            b.add(comp, "gen" if metric == "speed_gts" else "max_gen", gen)
    for attr, (metric, total) in AER.items():
        if attr not in files:
            continue
        text = files[attr]
        counts = parse_aer(text) if text is not None else None
        if counts is None or total not in counts:
            b.problem(comp, f"{where}/{attr}", "unreadable" if text is None else f"no {total} line")
            continue
        b.add(comp, metric, counts[total])
    for attr, metric in (("current_link_width", "width"), ("max_link_width", "max_width")):
        text = files.get(attr)
        t = (text or "").strip()
        if text is None or not (t.isascii() and t.isdigit()):
            b.problem(comp, f"{where}/{attr}", "unreadable" if text is None else f"not a lane count: {t[:40]!r}")
            continue
        b.add(comp, metric, int(t))

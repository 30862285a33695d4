"""``nvidia-smi -q`` text output → the same GPU observations as the XML form (pure).

The text form is an indented ``Label : value`` tree; a line may carry a value *and* children
(``HW Slowdown : Active`` with ``HW Thermal Slowdown`` indented below it). Elisions such as
``[...]`` (hand-trimmed excerpts) are skipped. Truncated captures give the GPUs and fields that
are present plus ``node: attached_gpus`` from the header, so a check can tell GPUs are missing.
``Unable to determine the device handle for GPU…`` (a GPU the driver counts but cannot open)
gives ``lost = True`` on that GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from minutiae.errors import ParseError
from minutiae.model.gpu_metrics import (
    REASON_LABELS,
    TLimit,
    emit_gpu,
    gpu_component,
    normalize_pci,
)
from minutiae.model.snapshot import Snapshot, SnapshotBuilder, to_int

SOURCE = "nvidia-smi-q"
#: what nvidia-smi prints for a GPU the driver counts but cannot open (fell off the bus, wedged):
#: "... for GPU0000:CB:00.0: Unknown Error", "... for GPU1: 0000:34:00.0: Unknown Error"
_NO_HANDLE = re.compile(
    r"Unable to determine the device handle for GPU\s*(?:(\d{1,3})(?=:\s|\s|$):?\s*)?"
    r"(?:([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]))?:?\s*(.*)$")


@dataclass
class _Node:
    value: str | None = None
    children: dict[str, _Node] = field(default_factory=dict)


#: temperatures as margins to T.Limit (``gpu_metrics.TLimit``; xml.TLIMIT's labels)
TLIMIT = TLimit(temperature=("Temperature/GPU Current Temp",),
                margin=("Temperature/GPU T.Limit Temp",),
                slowdown=("Temperature/GPU Slowdown T.Limit Temp",))

PATHS: dict[str, tuple[str, ...]] = {
    "name": ("Product Name",),
    "uuid": ("GPU UUID",),
    "vbios_version": ("VBIOS Version",),
    "pstate": ("Performance State",),
    "pcie_gen_current": ("PCI/GPU Link Info/PCIe Generation/Current",),
    "pcie_gen_max": ("PCI/GPU Link Info/PCIe Generation/Max",),
    "pcie_width_current": ("PCI/GPU Link Info/Link Width/Current",),
    "pcie_width_max": ("PCI/GPU Link Info/Link Width/Max",),
    "pcie_replay": ("PCI/Replays Since Reset", "PCI/Replays since reset"),
    "temperature_c": ("Temperature/GPU Current Temp",),
    "temperature_slowdown_c": ("Temperature/GPU Slowdown Temp",),
    "power_w": ("GPU Power Readings/Power Draw", "Power Readings/Power Draw",  # see xml.PATHS
                "GPU Power Readings/Average Power Draw", "GPU Power Readings/Instantaneous Power Draw"),
    "power_limit_w": (
        "GPU Power Readings/Current Power Limit",
        "Power Readings/Current Power Limit",
        "Power Readings/Power Limit",
    ),
    "reset_required": ("GPU Reset Status/Reset Required",),
    "remap_correctable": ("Remapped Rows/Correctable Error",),
    "remap_uncorrectable": ("Remapped Rows/Uncorrectable Error",),
    "remap_pending": ("Remapped Rows/Pending",),
    "remap_failure": ("Remapped Rows/Remapping Failure Occurred",),
    "retired_pages_sbe": ("Retired Pages/Single Bit ECC",),
    "retired_pages_dbe": ("Retired Pages/Double Bit ECC",),
    "retired_pages_pending": ("Retired Pages/Pending Page Blacklist", "Retired Pages/Pending"),
}


def _ecc(scope: str, label: str) -> dict[str, tuple[tuple[str, ...], ...]]:
    e = f"ECC Errors/{label}"
    return {
        f"ecc_sbe_{scope}": (
            (f"{e}/SRAM Correctable", f"{e}/DRAM Correctable"),
            (f"{e}/Single Bit/Total",),
        ),
        f"ecc_dbe_{scope}": (
            (
                f"{e}/SRAM Uncorrectable",
                f"{e}/SRAM Uncorrectable Parity",
                f"{e}/SRAM Uncorrectable SEC-DED",
                f"{e}/DRAM Uncorrectable",
            ),
            (f"{e}/Double Bit/Total",),
        ),
    }


SUMS = {**_ecc("volatile", "Volatile"), **_ecc("aggregate", "Aggregate")}


def _split(line: str) -> tuple[int, str, str | None]:
    indent = len(line) - len(line.lstrip(" "))
    body = line.strip()
    if " : " in body or body.endswith(" :"):
        key, _, value = body.partition(" :")
        return indent, key.strip(), value.strip()
    return indent, body, None


def _tree(lines: list[str]) -> _Node:
    root = _Node()
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for line in lines:
        if not line.strip() or line.strip() in ("[...]", "...") or line.startswith("="):
            continue
        indent, key, value = _split(line.rstrip("\r\n"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else root
        node = _Node(value)
        parent.children.setdefault(key, node)
        stack.append((indent, parent.children[key]))
    return root


def _get(node: _Node, path: str) -> str | None:
    cur = node
    for part in path.split("/"):
        nxt = cur.children.get(part)
        if nxt is None:
            return None
        cur = nxt
    return cur.value


def _find(node: _Node, key: str) -> _Node | None:
    """Depth-first search for ``key`` (reason labels nest under ``HW Slowdown``)."""
    for k, child in node.children.items():
        if k == key:
            return child
        found = _find(child, key)
        if found is not None:
            return found
    return None


def parse_nvidia_smi_text(text: str, where: str = "nvidia-smi -q") -> Snapshot:
    """Parse ``nvidia-smi -q`` output. Raises ``ParseError`` when no NVSMI header or GPU is found."""
    lines = text.splitlines()
    header: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("GPU ") and not line.startswith("GPU  "):
            sections.append((line[4:].strip(), []))
        elif sections:
            sections[-1][1].append(line)
        else:
            header.append(line)
    b = SnapshotBuilder(SOURCE)
    lost = 0
    for line in lines:
        m = _NO_HANDLE.search(line)
        if m is None:
            continue
        pci = normalize_pci(m.group(2)) if m.group(2) else None
        comp = gpu_component(pci) if pci else f"gpu:index{m.group(1) or lost}"
        b.add(comp, "lost", True)
        b.add(comp, "lost_reason", m.group(3).strip()[:120] or "unknown")
        lost += 1
    head = _tree(header)
    driver = _get(head, "Driver Version")
    attached = to_int(_get(head, "Attached GPUs") or "")
    if not sections and driver is None and attached is None and not lost:
        raise ParseError("no nvidia-smi -q header or GPU section found", where)
    if driver:
        b.add("node", "driver_version", driver)
    if attached is not None:
        b.add("node", "attached_gpus", attached)
    count = 0
    for bus, body in sections:
        pci = normalize_pci(bus)
        if pci is None:
            b.problem("node", f"{where}: GPU {bus[:40]}", "invalid PCI bus id")
            continue
        count += 1
        comp = gpu_component(pci)
        tree = _tree(body)
        if driver:
            b.add(comp, "driver_version", driver)
        block = tree.children.get("Clocks Event Reasons") or tree.children.get(
            "Clocks Throttle Reasons"
        ) or tree.children.get("Clocks Throttle Reasons")
        reasons: dict[str, str | None] = {}
        if block is not None:
            for label, name in REASON_LABELS.items():
                n = _find(block, label)
                reasons[name] = n.value if n is not None else None

        def get(path: str, _t: _Node = tree) -> str | None:
            return _get(_t, path)

        emit_gpu(b, comp, f"{where}: GPU {pci}", get, PATHS, SUMS, reasons, TLIMIT)
    b.add("node", "gpu_count", count)
    return b.build()

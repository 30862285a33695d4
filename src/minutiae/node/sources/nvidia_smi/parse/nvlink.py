"""``nvidia-smi nvlink --status`` (``-s``) text → NVLink observations (pure).

Format: ``GPU <n>: <name> (UUID: GPU-…)`` followed by indented ``Link <k>: 25 GB/s`` or
``Link <k>: <inactive>`` lines (a GPU without NVLink prints nothing; "all links are inactive"
is printed when none is up). Emits on ``gpu:index<n>`` (the caller maps UUIDs to PCI
addresses when another capture has them): ``uuid``, ``name``, ``nvlink_active_links``,
``nvlink_inactive_links``, ``nvlink<k>_down`` for each inactive link, ``nvlink_gbps_min``.
"""

from __future__ import annotations

import re

from minutiae.model.snapshot import Snapshot, SnapshotBuilder

SOURCE = "nvidia-smi-nvlink"
_GPU = re.compile(r"^GPU (\d{1,4}): (.*?)(?: \(UUID: (GPU-[0-9a-fA-F-]{8,64})\))?\s*$")
_LINK = re.compile(r"^\s+Link (\d{1,3}): (.*?)\s*$")
_SPEED = re.compile(r"^(\d+(?:\.\d+)?) GB/s$")


def parse_nvlink_status(text: str, where: str = "nvidia-smi nvlink -s") -> Snapshot:
    """Never raises: unknown lines become ``Problem``\\ s; an empty text is a GPU without NVLink."""
    b = SnapshotBuilder(SOURCE)
    comp: str | None = None
    counts: dict[str, list[int]] = {}
    speeds: dict[str, list[float]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _GPU.match(line)
        if m:
            comp = f"gpu:index{m.group(1)}"
            counts[comp] = [0, 0]
            b.add(comp, "name", m.group(2).strip())
            if m.group(3):
                b.add(comp, "uuid", m.group(3))
            continue
        m = _LINK.match(line)
        if m and comp is not None:
            state = m.group(2)
            speed = _SPEED.match(state)
            if speed:
                counts[comp][0] += 1
                speeds.setdefault(comp, []).append(float(speed.group(1)))
            elif "inactive" in state.lower():
                counts[comp][1] += 1
                b.add(comp, f"nvlink{m.group(1)}_down", True)
            else:
                b.problem(comp, f"{where}:{n}", f"unknown link state {state[:40]!r}")
            continue
        if comp is not None and "all links are inactive" in line.lower():
            counts[comp][1] = max(counts[comp][1], 1)
            continue
        b.problem(comp or "node", f"{where}:{n}", f"not nvidia-smi nvlink output: {line.strip()[:60]!r}")
    for c, (up, down) in counts.items():
        b.add(c, "nvlink_active_links", up)
        b.add(c, "nvlink_inactive_links", down)
        if speeds.get(c):
            b.add(c, "nvlink_gbps_min", min(speeds[c]))
    return b.build()


def by_uuid(nvlink: Snapshot, gpus: Snapshot) -> Snapshot:
    """Move ``gpu:index<n>`` observations onto the ``gpu:<pci>`` component that ``gpus`` gives
    the same UUID (left on ``gpu:index<n>`` when no capture names that UUID)."""
    where = {str(o.value): o.component for o in gpus.observations if o.metric == "uuid"}
    index_to = {o.component: where.get(str(o.value)) for o in nvlink.observations if o.metric == "uuid"}
    b = SnapshotBuilder(nvlink.source)
    for o in nvlink.observations:
        target = index_to.get(o.component) or o.component
        if target != o.component and o.metric in ("uuid", "name"):
            continue  # already on the GPU's own component
        b.add(target, o.metric, o.value)
    for p in nvlink.problems:
        b.problem(index_to.get(p.component) or p.component, p.where, p.message)
    return b.build()

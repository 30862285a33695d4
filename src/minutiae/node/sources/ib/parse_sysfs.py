"""sysfs InfiniBand port files → observations on ``ib:<device>/<port>`` (pure).

Input is what ``/sys/class/infiniband/<dev>/ports/<port>/`` holds, as ``{relative name: text}``
(``state``, ``phys_state``, ``rate``, ``link_layer``, ``counters/<c>``, ``hw_counters/<c>``);
a file that could not be read is passed as ``None`` and becomes a ``Problem`` naming its path.

Metrics: ``state`` (``ACTIVE``, ``DOWN``, ``INIT``, ``ARMED``…) and ``state_code`` (4 = ACTIVE),
``phys_state`` (``LinkUp``, ``Disabled``, ``Polling``…) and ``phys_state_code`` (5 = LinkUp),
``rate_gbps`` (e.g. 400.0), ``width`` (lanes, 4 for ``4X``), ``speed`` (``NDR``, ``HDR``…),
``link_layer`` (``InfiniBand``/``Ethernet``), every ``counters/<name>`` as ``<name>`` and every
``hw_counters/<name>`` as ``hw_<name>`` (non-negative integers). Device attributes
(``hca_type``, ``fw_ver``, ``board_id``, and ``pci`` — the HCA's PCI address from the
``device`` link on a live node) go on the same component.

Node-level counts on ``ib_node`` (:func:`with_port_counts`, every IB parser): ``ib_ports`` and
``ib_active_ports``, what ``ib.port-count-expected`` compares with ``--expected-ib-ports``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from minutiae.model.findings import Observation
from minutiae.model.snapshot import Problem, Snapshot, SnapshotBuilder

SOURCE = "sysfs-ib"
#: the node-level InfiniBand component: port counts (``ib_ports``, ``ib_active_ports``)
NODE_COMPONENT = "ib_node"
#: what drivers/infiniband/core/sysfs.c writes in counters/* when the device has no PMA
NO_PMA = "N/A (no PMA)"
_STATE = re.compile(r"^\s*(\d+)\s*:\s*([A-Za-z_]+)\s*$")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec\s*(?:\((\d+)X\s*([A-Za-z0-9]*)\))?\s*$")


def ib_component(device: str, port: str) -> str:
    return f"ib:{device}/{port}"


def with_fabric_ports(snap: Snapshot) -> Snapshot:
    """``snap`` plus ``fabric_port`` on every IB port: whether it is on the node's RDMA fabric.
    The fabric is InfiniBand when any port's link layer is, else Ethernet (RoCE); a port of the
    other layer (an Ethernet front-end port beside InfiniBand ports, often unused) is not, and
    a port of unknown layer is. The port rules drain on fabric ports only."""
    layers = {o.component: o.value for o in snap.observations
              if o.metric == "link_layer" and o.component.startswith("ib:")}
    fabric = "InfiniBand" if "InfiniBand" in layers.values() else "Ethernet"
    extra = [Observation(snap.source, comp, "fabric_port", layers.get(comp, fabric) == fabric,
                         None) for comp in snap.components("ib:")]
    return Snapshot(snap.source, snap.observations + tuple(extra), snap.problems)


def with_port_counts(snap: Snapshot) -> Snapshot:
    """``snap`` plus ``ib_node: ib_ports`` (the ports whose link layer is InfiniBand) and
    ``ib_node: ib_active_ports`` (those whose state is ACTIVE: a port DOWN, INIT or ARMED is
    not). Ethernet (RoCE) ports, and ports whose link layer is not known, are not counted, as
    GPUd's infiniband component counts only ``IsIBPort()`` ports toward its "at least N ports".
    A missing HCA takes its ports out of sysfs: the count is how the node notices. Nothing is
    added when ``snap`` has no port at all (a reading that failed says so by its problems)."""
    layer: dict[str, str] = {}
    state: dict[str, str] = {}
    for o in snap.observations:
        if o.component.startswith("ib:"):
            layer.setdefault(o.component, "")
            if o.metric == "link_layer":
                layer[o.component] = str(o.value).casefold()
            elif o.metric == "state":
                state[o.component] = str(o.value)
    if not layer:
        return snap
    ib = [p for p, lay in layer.items() if lay == "infiniband"]
    active = sum(1 for p in ib if state.get(p) == "ACTIVE")
    return Snapshot(snap.source, snap.observations + port_counts(snap.source, len(ib), active),
                    snap.problems)


def port_counts(source: str, ports: int, active: int) -> tuple[Observation, ...]:
    """The ``ib_node`` counts as observations (time: the check's)."""
    return (Observation(source, NODE_COMPONENT, "ib_ports", ports, None),
            Observation(source, NODE_COMPONENT, "ib_active_ports", active, None))


def no_ports(where: str, reason: str, expected: int) -> Snapshot:
    """The reading of a node with no InfiniBand device at all (``where``: the missing or empty
    ``class/infiniband``) when ``expected`` ports are expected: no port counted, and the reason
    (naming the expectation) as a problem, so the check is never OK, also while
    ``ib.port-count-expected`` waits out its boot grace and persistence."""
    message = f"{reason}; {expected} InfiniBand port(s) expected (--expected-ib-ports)"
    return Snapshot(SOURCE, port_counts(SOURCE, 0, 0), (Problem("ib", where, message),))


def parse_state(text: str) -> tuple[int, str] | None:
    """``'4: ACTIVE'`` → ``(4, 'ACTIVE')``."""
    m = _STATE.match(text)
    return (int(m.group(1)), m.group(2)) if m else None


def parse_rate(text: str) -> tuple[float, int | None, str | None] | None:
    """``'400 Gb/sec (4X NDR)'`` → ``(400.0, 4, 'NDR')``; ``'10 Gb/sec'`` → ``(10.0, None, None)``."""
    m = _RATE.match(text)
    if not m:
        return None
    width = int(m.group(2)) if m.group(2) else None
    return float(m.group(1)), width, (m.group(3) or None)


def parse_ib_port(
    b: SnapshotBuilder,
    device: str,
    port: str,
    files: Mapping[str, str | None],
    where: str,
    device_attrs: Mapping[str, str | None] | None = None,
) -> None:
    """Add the observations of one port to ``b``; ``where`` is the port directory (for messages)."""
    comp = ib_component(device, port)
    for name, text in (device_attrs or {}).items():
        if text is not None and text.strip():
            b.add(comp, name, text.strip())
    for name in ("state", "phys_state"):
        if name not in files:
            b.problem(comp, f"{where}/{name}", "missing")
            continue
        text = files[name]
        parsed = parse_state(text) if text is not None else None
        if parsed is None:
            b.problem(comp, f"{where}/{name}", "unreadable" if text is None else f"not '<code>: <name>': {text.strip()[:40]!r}")
            continue
        b.add(comp, f"{name}_code", parsed[0])
        b.add(comp, name, parsed[1])
    _rate_file(b, comp, files, where)
    text = files.get("link_layer")
    if text is not None and text.strip():
        b.add(comp, "link_layer", text.strip())
    _counters(b, comp, files, where)


def _rate_file(b: SnapshotBuilder, comp: str, files: Mapping[str, str | None], where: str) -> None:
    if "rate" not in files:
        b.problem(comp, f"{where}/rate", "missing")
        return
    text = files["rate"]
    rate = parse_rate(text) if text is not None else None
    if rate is None:
        b.problem(comp, f"{where}/rate", "unreadable" if text is None else f"not '<n> Gb/sec (<w>X <speed>)': {text.strip()[:40]!r}")
        return
    b.add(comp, "rate_gbps", rate[0])
    if rate[1] is not None:
        b.add(comp, "width", rate[1])
    if rate[2]:
        b.add(comp, "speed", rate[2])


def _counters(b: SnapshotBuilder, comp: str, files: Mapping[str, str | None], where: str) -> None:
    """``counters/*`` and ``hw_counters/*`` (as ``hw_<name>``): 64-bit non-negative integers."""
    for rel, text in sorted(files.items()):
        group, _, counter = rel.partition("/")
        if group not in ("counters", "hw_counters") or not counter:
            continue
        metric = counter if group == "counters" else f"hw_{counter}"
        if text is None:
            b.problem(comp, f"{where}/{rel}", "unreadable")
            continue
        t = text.strip()
        if t == NO_PMA:  # the kernel's answer for a device without a PMA (iWARP: i40iw): not counted
            continue
        if not (t.isascii() and t.isdigit()):
            b.problem(comp, f"{where}/{rel}", f"not a non-negative integer: {t[:40]!r}")
            continue
        if len(t) > 20 or int(t) >= 1 << 64:
            b.problem(comp, f"{where}/{rel}", f"not a 64-bit counter ({len(t)} digits)")
            continue
        b.add(comp, metric, int(t))

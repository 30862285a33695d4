"""``ibstat`` and ``ibstatus`` text → the same observations as the sysfs IB parser (pure).

``ibstat`` prints ``CA 'mlx5_0'`` blocks with ``Port N:`` sub-blocks (``State: Active``,
``Physical state: LinkUp``, ``Rate: 400``, ``Link layer: InfiniBand``); ``ibstatus`` prints
``Infiniband device 'mlx5_0' port 1 status:`` blocks in sysfs wording (``state: 4: ACTIVE``,
``rate: 200 Gb/sec (4X HDR)``). Both give ``ib:<dev>/<port>`` with ``state``/``state_code``,
``phys_state``/``phys_state_code``, ``rate_gbps`` (+ ``width``/``speed`` from ibstatus),
``link_layer``, ``hca_type``, ``fw_ver``. An ``ibpanic:`` line (ibstat failed part-way)
becomes a ``Problem``: the ports after it are unknown, not healthy.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from minutiae.errors import ParseError
from minutiae.model.snapshot import Snapshot, SnapshotBuilder, leading_number
from minutiae.node.sources.ib.parse_sysfs import (
    ib_component,
    parse_rate,
    parse_state,
    with_fabric_ports,
    with_port_counts,
)

SOURCE = "ibstat"
STATE_CODES = {"DOWN": 1, "INIT": 2, "INITIALIZING": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
PHYS_CODES = {"Sleep": 1, "Polling": 2, "Disabled": 3, "PortConfigurationTraining": 4,
              "LinkUp": 5, "LinkErrorRecovery": 6, "Phy Test": 7}
_CA = re.compile(r"^CA '([^']{1,64})'\s*$")
_PORT = re.compile(r"^\s+Port (\d{1,3}):\s*$")
_KV = re.compile(r"^\s+([A-Za-z][A-Za-z _]*?)\s*:\s*(.*?)\s*$")
_DEV = re.compile(r"^Infiniband device '([^']{1,64})' port (\d{1,3}) status:\s*$")


def _state_name(text: str) -> str:
    t = text.strip().upper()
    return "INIT" if t == "INITIALIZING" else t


def parse_ibstat(text: str, where: str = "ibstat") -> Snapshot:
    """Parse ``ibstat`` or ``ibstatus`` output. Raises ``ParseError`` when neither format is
    recognised anywhere in ``text``."""
    b = SnapshotBuilder(SOURCE)
    dev: str | None = None
    port: str | None = None
    attrs: dict[str, str] = {}
    found = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("ibpanic:"):
            b.problem("ib", f"{where}:{n}", line.strip()[:200])
            continue
        m = _CA.match(line)
        if m:
            dev, port, attrs, found = m.group(1), None, {}, True
            continue
        m = _DEV.match(line)
        if m:
            dev, port, attrs, found = m.group(1), m.group(2), {}, True
            continue
        m = _PORT.match(line)
        if m and dev is not None:
            port = m.group(1)
            comp = ib_component(dev, port)
            for k, v in attrs.items():
                b.add(comp, k, v)
            continue
        m = _KV.match(line)
        if not m or dev is None:
            continue
        key, value = m.group(1).lower(), m.group(2)
        if port is None:
            if key in _CA_ATTRS:
                attrs[_CA_ATTRS[key]] = value
            continue
        _port_value(b, ib_component(dev, port), key, value, f"{where}:{n}")
    if not found:
        raise ParseError("no ibstat (CA '...') or ibstatus (Infiniband device ...) block found", where)
    return with_port_counts(with_fabric_ports(b.build()))


#: CA-level keys whose values every port of the CA gets
_CA_ATTRS = {"ca type": "hca_type", "firmware version": "fw_ver"}


def _port_value(b: SnapshotBuilder, comp: str, key: str, value: str, at: str) -> None:
    """One ``key: value`` line of a port block."""
    if key == "state":
        _state(b, comp, value, at, "state", lambda v: STATE_CODES.get(_state_name(v)), _state_name)
    elif key in ("physical state", "phys state"):
        _state(b, comp, value, at, "phys_state", PHYS_CODES.get, lambda v: v)
    elif key == "rate":
        _rate(b, comp, value, at)
    elif key in ("link layer", "link_layer"):
        b.add(comp, "link_layer", value)


def _state(b: SnapshotBuilder, comp: str, value: str, at: str, metric: str,
           code_of: Callable[[str], int | None], name_of: Callable[[str], str]) -> None:
    """A port (or physical) state: ``4: ACTIVE`` or a bare name, as a code and a name."""
    st = parse_state(value)
    name = st[1] if st else name_of(value)
    code = st[0] if st else code_of(value)
    if code is None:
        what = "port state" if metric == "state" else "physical state"
        b.problem(comp, at, f"unknown {what} {value[:40]!r}")
        return
    b.add(comp, f"{metric}_code", code)
    b.add(comp, metric, name)


def _rate(b: SnapshotBuilder, comp: str, value: str, at: str) -> None:
    rate = parse_rate(value)
    if rate is not None:
        b.add(comp, "rate_gbps", rate[0])
        if rate[1] is not None:
            b.add(comp, "width", rate[1])
        if rate[2]:
            b.add(comp, "speed", rate[2])
        return
    num = leading_number(value)
    if num is None:
        b.problem(comp, at, f"rate is not a number: {value[:40]!r}")
    else:
        b.add(comp, "rate_gbps", num)

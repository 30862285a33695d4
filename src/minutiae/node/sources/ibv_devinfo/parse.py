"""``ibv_devinfo [-v]`` text (rdma-core) → IB port observations (pure).

Blocks ``hca_id: mlx5_0`` (``fw_ver``, ``vendor_part_id`` …) with ``port: N`` sub-blocks
(``state: PORT_ACTIVE (4)``, ``max_mtu: 4096 (5)``, ``active_mtu: 1024 (3)``, ``link_layer:
Ethernet``; with ``-v`` also ``phys_state: LINK_UP (5)``, ``active_width: 4X (2)``,
``active_speed: 25.0 Gbps (32)``). Components ``ib:<hca>/<port>`` with ``state`` (``ACTIVE``,
``DOWN`` … as sysfs and ibstat say it) and ``state_code``, ``phys_state``, ``active_mtu``,
``max_mtu``, ``link_layer``, ``fw_ver``, ``hca_type`` (``MT<vendor_part_id>``), so the ``ib.*``
rules (port down, …) judge it like the other IB sources.
"""

from __future__ import annotations

import re

from minutiae.errors import ParseError
from minutiae.model.snapshot import Snapshot, SnapshotBuilder
from minutiae.node.sources.ib.parse_sysfs import with_fabric_ports, with_port_counts

SOURCE = "ibv_devinfo"
_HCA = re.compile(r"^hca_id:\s*(\S{1,64})\s*$")
_PORT = re.compile(r"^\s+port:\s*(\d{1,3})\s*$")
_KV = re.compile(r"^\s+([a-z_]{2,32}):\s*(.*?)\s*$")
_CODE = re.compile(r"^(\S+)\s+\((\d{1,3})\)$")
_PHYS = {"SLEEP": "Sleep", "POLLING": "Polling", "DISABLED": "Disabled",
         "PORT_CONFIGURATION_TRAINING": "PortConfigurationTraining", "LINK_UP": "LinkUp",
         "LINK_ERROR_RECOVERY": "LinkErrorRecovery", "PHY_TEST": "Phy Test"}


def _port_value(b: SnapshotBuilder, comp: str, key: str, value: str) -> None:
    m = _CODE.match(value)
    if key == "state" and m:
        b.add(comp, "state", m.group(1).removeprefix("PORT_"))
        b.add(comp, "state_code", int(m.group(2)))
    elif key == "phys_state" and m:
        b.add(comp, "phys_state", _PHYS.get(m.group(1), m.group(1)))
        b.add(comp, "phys_state_code", int(m.group(2)))
    elif key in ("active_mtu", "max_mtu") and m and m.group(1).isdigit():
        b.add(comp, key, int(m.group(1)))
    elif key in ("link_layer", "active_width", "active_speed"):
        b.add(comp, key, (m.group(1) if m and key == "active_width" else value))


def parse_ibv_devinfo(text: str, where: str = "ibv_devinfo") -> Snapshot:
    """Parse ``ibv_devinfo`` output. Raises ``ParseError`` when it has no ``hca_id`` port."""
    b = SnapshotBuilder(SOURCE)
    hca: str | None = None
    dev: dict[str, str] = {}
    comp: str | None = None
    ports = 0
    for line in text.splitlines():
        m = _HCA.match(line)
        if m:
            hca, dev, comp = m.group(1), {}, None
            continue
        m = _PORT.match(line)
        if m and hca is not None:
            comp = f"ib:{hca}/{int(m.group(1))}"
            ports += 1
            if dev.get("fw_ver"):
                b.add(comp, "fw_ver", dev["fw_ver"])
            if dev.get("vendor_part_id", "").isdigit():
                b.add(comp, "hca_type", f"MT{dev['vendor_part_id']}")
            continue
        m = _KV.match(line)
        if m is None or hca is None:
            continue
        if comp is None:
            dev[m.group(1)] = m.group(2)
        else:
            _port_value(b, comp, m.group(1), m.group(2))
    if not ports:
        raise ParseError("no 'hca_id:' device with a 'port:' (is this ibv_devinfo output?)", where)
    return with_port_counts(with_fabric_ports(b.build()))

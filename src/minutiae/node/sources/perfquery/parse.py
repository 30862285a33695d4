"""``perfquery`` text (infiniband-diags) → the IB port counters the counter rules read (pure).

``perfquery [-x] [-e]`` prints one block per port: a header ``# Port counters: Lid 10 port 1
(CapMask: …)`` (``# Port extended counters: …`` with ``-x``) and ``Name:....value`` lines
(``SymbolErrorCounter:..............0``). The names become the sysfs counter names the
``ib.*`` rules use (``symbol_error``, ``link_downed``, ``port_rcv_errors``, ``port_xmit_discards``
…), so rates work with ``--state-file`` exactly as for sysfs. perfquery names no device: the
component is ``ib:lid<lid>/<port>``. A counter that is not a number is a ``Problem``.
"""

from __future__ import annotations

import re

from minutiae.errors import ParseError
from minutiae.model.snapshot import Snapshot, SnapshotBuilder

SOURCE = "perfquery"
#: perfquery field → sysfs counter name (drivers/infiniband/core/sysfs.c)
NAMES = {
    "SymbolErrorCounter": "symbol_error",
    "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed",
    "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors",
    "PortXmitDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "VL15Dropped": "VL15_dropped",
    "PortXmitWait": "port_xmit_wait",
    "PortXmitData": "port_xmit_data",
    "PortRcvData": "port_rcv_data",
    "PortXmitPkts": "port_xmit_packets",
    "PortRcvPkts": "port_rcv_packets",
    "PortUnicastXmitPkts": "unicast_xmit_packets",
    "PortUnicastRcvPkts": "unicast_rcv_packets",
    "PortMulticastXmitPkts": "multicast_xmit_packets",
    "PortMulticastRcvPkts": "multicast_rcv_packets",
}
_HEADER = re.compile(r"^# Port (?:extended )?counters: Lid (\d{1,5}) port (\d{1,3})\b")
_FIELD = re.compile(r"^([A-Za-z0-9]+):\.*(.*?)\s*$")
_MAX = 2**64


def parse_perfquery(text: str, where: str = "perfquery") -> Snapshot:
    """Parse ``perfquery`` output (one or more ports). Raises ``ParseError`` when it has no
    port block at all."""
    b = SnapshotBuilder(SOURCE)
    comp: str | None = None
    ports = 0
    for n, line in enumerate(text.splitlines(), 1):
        m = _HEADER.match(line)
        if m:
            comp = f"ib:lid{int(m.group(1))}/{int(m.group(2))}"
            ports += 1
            continue
        m = _FIELD.match(line)
        if comp is None or m is None or m.group(1) not in NAMES:
            continue
        value = m.group(2)
        if value.isascii() and value.isdigit() and int(value) < _MAX:
            b.add(comp, NAMES[m.group(1)], int(value))
        else:
            b.problem(comp, f"{where}:{n}", f"{m.group(1)} is not a counter: {value[:40]!r}")
    if not ports:
        raise ParseError("no '# Port counters: Lid N port N' block (is this perfquery output?)", where)
    return b.build()

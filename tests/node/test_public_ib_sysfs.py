"""InfiniBand sysfs reader on real pastes (tests/data/ib_sysfs_pastes/README.md): each paste is
turned, at test time, into the ``/sys/class/infiniband`` files it shows, and ``read_sysfs_ib``
reads that tree as it reads ``/sys``. A clean clone without ../shared still runs the sysfs
reader on real file contents."""

from __future__ import annotations

import re
from pathlib import Path

from minutiae.node.check import CheckConfig, CheckMemory, run_check
from minutiae.node.sources.ib.parse_ibstat import parse_ibstat
from minutiae.node.sources.ib.read_sysfs import read_sysfs_ib
from minutiae.testing import FakeClock
from minutiae.testing.sysfs import ib_port, set_file

DATA = Path(__file__).resolve().parents[1] / "data" / "ib_sysfs_pastes"
IBSTATUS = DATA / "ibstatus-roce-nccl-1866.txt"
I40IW = DATA / "grep-counters-i40iw-node_exporter-966.txt"

#: ``grep . <file>...`` line: the path up to the attribute name (no ':' in it), then the value
GREP_LINE = re.compile(r"^.*/infiniband/([^/]+)/ports/(\d+)/((?:counters/|hw_counters/)?\w+):(.*)$")
#: ``ibstatus`` prints the port files: its labels and the sysfs names they come from
IBSTATUS_FILES = {"state": "state", "phys state": "phys_state", "rate": "rate", "link_layer": "link_layer"}
IBSTATUS_PORT = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:$")


def _tree_from_grep(paste: Path, root: Path) -> Path:
    for line in paste.read_text().splitlines():
        m = GREP_LINE.match(line)
        if m:
            set_file(root, f"{ib_port(root, m[1], m[2])}/{m[3]}", m[4] + "\n")
    return root


def _tree_from_ibstatus(paste: Path, root: Path) -> Path:
    port = ""
    for line in paste.read_text().splitlines():
        if m := IBSTATUS_PORT.match(line):
            port = ib_port(root, m[1], m[2])
            continue
        label, _, value = line.strip().partition(":")
        if port and label in IBSTATUS_FILES:
            set_file(root, f"{port}/{IBSTATUS_FILES[label]}", value.strip() + "\n")
    return root


def test_roce_ports_from_ibstatus_read_through_sysfs(tmp_path: Path) -> None:
    s = read_sysfs_ib(_tree_from_ibstatus(IBSTATUS, tmp_path))
    assert s.problems == ()
    assert s.components("ib:") == ["ib:mlx5_0/1", "ib:mlx5_1/1"]
    for p in s.components("ib:"):
        assert (s.value(p, "state"), s.value(p, "state_code")) == ("ACTIVE", 4)
        assert (s.value(p, "phys_state"), s.value(p, "phys_state_code")) == ("LinkUp", 5)
        assert (s.value(p, "rate_gbps"), s.value(p, "width"), s.value(p, "speed")) == (100.0, 4, "EDR")
        assert s.value(p, "link_layer") == "Ethernet"
        assert s.value(p, "fabric_port") is True  # an all-Ethernet node: RoCE is its fabric


def test_sysfs_and_ibstatus_parsers_agree_on_the_same_paste(tmp_path: Path) -> None:
    via_sysfs = read_sysfs_ib(_tree_from_ibstatus(IBSTATUS, tmp_path))
    via_text = parse_ibstat(IBSTATUS.read_text(), str(IBSTATUS))
    metrics = ("state", "state_code", "phys_state", "phys_state_code", "rate_gbps", "width", "speed", "link_layer")
    assert via_text.components("ib:") == via_sysfs.components("ib:")
    for p in via_sysfs.components("ib:"):
        assert [via_text.value(p, m) for m in metrics] == [via_sysfs.value(p, m) for m in metrics]


def test_roce_ports_pass_the_ib_check(tmp_path: Path) -> None:
    root = _tree_from_ibstatus(IBSTATUS, tmp_path / "sys")
    cfg = CheckConfig(sysfs_root=root, kmsg=None, nvidia_smi_xml=None, node="n", checks=("ib",))
    ib = run_check(cfg, FakeClock(), memory=CheckMemory()).results[0]
    assert (ib.status.label, ib.reason, ib.findings) == ("ok", None, ())


def test_iwarp_counters_without_a_pma_are_not_problems(tmp_path: Path) -> None:
    # i40iw (Intel X722 iWARP) answers "N/A (no PMA)" for every IB counter: nothing is counted,
    # and the port is not unreadable because of it (fails before the parser knew that answer,
    # when each counter was a problem and the IB check of such a node was always "unknown")
    root = _tree_from_grep(I40IW, tmp_path)
    assert sorted(p.name for p in (root / ib_port(root, "i40iw0") / "counters").iterdir()) == [
        "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery", "local_link_integrity_errors",
        "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets"]
    s = read_sysfs_ib(root)
    assert s.observations == ()  # no counter value, no port file: nothing observed
    # the paste shows the counters only: the port files it does not show are the only problems
    assert sorted(p.where.rsplit("/", 1)[-1] for p in s.problems) == ["phys_state", "rate", "state"]

"""Topology of the real H200 node in tests/data/h200 (captured live): its sysfs tree,
``nvidia-smi topo -m`` and NCCL 2.28's own topology dump, read offline as on the node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minutiae.analyses.topology.parse.detect import parse_topology
from minutiae.analyses.topology.parse.nccl import parse_nccl_topo
from minutiae.analyses.topology.plan import make_plan
from minutiae.analyses.topology.read_sysfs import read_sysfs_topology
from minutiae.errors import ParseError

H200 = Path(__file__).resolve().parents[2] / "data" / "h200"
CPUS = tuple(range(16))


def test_sysfs_tree_reads_as_it_did_on_the_node() -> None:
    t = read_sysfs_topology(H200 / "sysfs" / "sys")
    (g,) = t.gpus
    assert (g.pci, g.numa, g.cpus) == ("0000:00:06.0", None, CPUS)  # numa_node is -1 in this VM
    assert (g.pcie_gen, g.pcie_width, g.pcie_max_gen, g.pcie_max_width) == (5, 16, 5, 16)
    assert t.facts["driver"] == "580.159.04" and t.numa_cpus == {0: CPUS}
    assert t.nics == () and t.nvmes == ()  # virtio NIC and disks only
    live = json.loads((H200 / "minutiae" / "topo-replay.json").read_text())
    assert [x["pci"] for x in live["gpus"]] == [g.pci] and live["facts"] == dict(t.facts)


def test_topo_m_gives_the_numa_node_sysfs_does_not() -> None:
    t = parse_topology((H200 / "nvidia-smi-topo-m.txt").read_bytes(), "topo -m")
    (g,) = t.gpus
    assert (g.index, g.numa, g.cpus) == (0, 0, CPUS)


def test_ncclss_own_dump_of_this_node() -> None:
    t = parse_nccl_topo((H200 / "loaded" / "nccl-topo.xml").read_bytes(), "nccl-topo.xml")
    (g,) = t.gpus
    assert (g.pci, g.numa) == ("0000:00:06.0", None)  # numaid="-1": no NUMA node, as in sysfs
    assert t.numa_cpus == {}
    (nic,) = t.nics
    assert nic.numa is None
    assert (nic.name, nic.rate_gbps, nic.gdr) == ("eth0", 10.0, False)


def test_ncclss_graph_dump_is_refused_by_name() -> None:
    with pytest.raises(ParseError, match="NCCL graph file"):
        parse_nccl_topo((H200 / "loaded" / "nccl-graph.xml").read_bytes(), "nccl-graph.xml")


def test_plan_keeps_the_first_cpu_for_the_system_as_on_the_node() -> None:
    plan = make_plan(read_sysfs_topology(H200 / "sysfs" / "sys"))
    (rank,) = plan.ranks
    assert rank.cpus == tuple(range(1, 16))
    assert "cpus=1-15" in (H200 / "minutiae" / "topo-plan.txt").read_text()

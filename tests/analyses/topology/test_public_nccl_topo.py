"""NCCL topology XML vendored in tests/data/nccl_topo_public (README.md there): the
NCCL_TOPO_DUMP_FILE of an OCI BM.GPU.H100.8 node (8x H100 SXM, 4 NVSwitches, 8 dual-port
ConnectX-7 RoCE NICs, two Sapphire Rapids sockets). A clean clone without ../shared still runs
the NCCL XML parser, the placement and ``minutiae topo --from`` on a real dump."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.analyses.topology.parse.detect import TopoFormat, detect_format, parse_topology
from minutiae.analyses.topology.placement import place_gpus
from minutiae.cli.main import main
from minutiae.model.topology import NicKind, NodeTopology, PathType, format_cpulist

DUMP = Path(__file__).resolve().parents[2] / "data" / "nccl_topo_public" / "oci-bm-gpu-h100-8-topology.xml"
GPU_BUS = ["0f", "2d", "44", "5b", "89", "a8", "c0", "d8"]
#: the dual-port NIC under each GPU's PCIe switch (its two <net> share the PCI function)
NIC_BUS = ["0c", "2a", "41", "58", "86", "a5", "bd", "d5"]
NIC_NAMES = [("mlx5_0", "mlx5_1"), ("mlx5_3", "mlx5_4"), ("mlx5_5", "mlx5_6"), ("mlx5_7", "mlx5_8"),
             ("mlx5_9", "mlx5_10"), ("mlx5_12", "mlx5_13"), ("mlx5_14", "mlx5_15"), ("mlx5_16", "mlx5_17")]


@pytest.fixture(scope="module")
def topo() -> NodeTopology:
    return parse_topology(DUMP.read_bytes(), str(DUMP))


def test_gpus_numa_and_cpu_affinity(topo: NodeTopology) -> None:
    assert detect_format(DUMP.read_bytes()) is TopoFormat.NCCL_XML
    assert topo.source == "nccl-topo-xml"
    assert [g.pci for g in topo.gpus] == [f"0000:{b}:00.0" for b in GPU_BUS]
    assert [g.index for g in topo.gpus] == list(range(8))
    assert [g.numa for g in topo.gpus] == [0] * 4 + [1] * 4
    # affinity masks 00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff and its mirror
    assert {k: format_cpulist(v) for k, v in topo.numa_cpus.items()} == {0: "0-55,112-167", 1: "56-111,168-223"}
    assert format_cpulist(topo.gpus[7].cpus) == "56-111,168-223"
    assert {(g.pcie_gen, g.pcie_width) for g in topo.gpus} == {(5, 16)}  # 32.0 GT/s x16


def test_nvswitch_peers_once_each_with_18_links(topo: NodeTopology) -> None:
    # each GPU lists one <nvlink> per NVSwitch (4 switches, 5+5+4+4 = 18 links): every other GPU
    # is a peer once, over 18 links (fails before: each peer came once per switch, 28 entries)
    for g in topo.gpus:
        assert g.nvlink_peers == tuple(i for i in range(8) if i != g.index)
        assert [(lk.peer, lk.links, lk.via_switch) for lk in g.nvlinks] == [
            (i, 18, True) for i in range(8) if i != g.index]


def test_sixteen_roce_ports_on_eight_nics(topo: NodeTopology) -> None:
    names = [n for pair in NIC_NAMES for n in pair]
    assert sorted(n.name for n in topo.nics) == sorted(names)
    by_name = {n.name: n for n in topo.nics}
    for bus, pair in zip(NIC_BUS, NIC_NAMES, strict=True):
        assert [(by_name[n].pci, by_name[n].port) for n in pair] == [(f"0000:{bus}:00.0", 1), (f"0000:{bus}:00.0", 2)]
    assert {n.kind for n in topo.nics} == {NicKind.ETHERNET}  # class 0x020000, Mellanox vendor
    assert {n.rate_gbps for n in topo.nics} == {180.0}  # speed="180000"
    assert {n.gdr for n in topo.nics} == {True}
    assert [by_name[n].numa for n, _ in NIC_NAMES] == [0] * 4 + [1] * 4


def test_each_gpu_pairs_with_the_nic_under_its_switch(topo: NodeTopology) -> None:
    pairs = {p.gpu.index: (set(p.nearest_nics), p.nic_path) for p in place_gpus(topo)}
    assert pairs == {i: (set(NIC_NAMES[i]), PathType.PIX) for i in range(8)}
    assert topo.gpu_nic[(0, "mlx5_3")] is PathType.NODE  # same socket, other switch
    assert topo.gpu_nic[(0, "mlx5_9")] is PathType.SYS  # other socket


def test_topo_from_plans_one_nic_pair_per_rank(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topo", "--from", str(DUMP), "--plan"]) == 0
    out = capsys.readouterr().out
    assert "rank 0: GPU0 cpus=1-13,113-125 mem=0 nic=mlx5_0,mlx5_1 (PIX)" in out
    assert "rank 7: GPU7 cpus=98-111,210-223 mem=1 nic=mlx5_16,mlx5_17 (PIX)" in out

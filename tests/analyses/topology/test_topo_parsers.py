"""Topology parsers on the real captures in ../shared/realdata (read in place), exact values."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.analyses.topology.parse.detect import TopoFormat, detect_format, parse_topology
from minutiae.analyses.topology.parse.hwloc import parse_hwloc_xml
from minutiae.analyses.topology.parse.matrix import parse_topo_matrix
from minutiae.analyses.topology.parse.nccl import parse_nccl_topo
from minutiae.analyses.topology.parse.topo_json import topology_from_json
from minutiae.analyses.topology.placement import place_gpus, report
from minutiae.errors import ParseError
from minutiae.model.topology import NicKind, NodeTopology, PathType, format_cpulist
from minutiae.testing.topology import dgx_like_topology, render_topo_matrix


def _load(realdata: Path, rel: str) -> NodeTopology:
    p = realdata / rel
    if not p.exists():
        pytest.skip(f"missing {p}")
    return parse_topology(p.read_bytes(), str(p))


def _pairing(t: NodeTopology) -> dict[int, tuple[tuple[str, ...], str]]:
    return {p.gpu.index: (p.nearest_nics, p.nic_path.value) for p in place_gpus(t)}


# --- nvidia-smi topo -m ------------------------------------------------------------------------

SMI = "nvidia_smi/ml-engineering"


@pytest.mark.parametrize("name,links,cpus0,cpus1", [
    ("topo_m_8xA100_nv12_compact.txt", 12, "0-23", "24-47"),
    ("topo_m_8xH100_nv18_compact.txt", 18, "0-51", "52-103"),
    ("topo_m_8xH100_nv18_numa.txt", 18, "0-51,104-155", "52-103,156-207"),
])
def test_smi_eight_gpu_matrices(realdata: Path, name: str, links: int, cpus0: str, cpus1: str) -> None:
    t = _load(realdata, f"{SMI}/{name}")
    assert t.source == "nvidia-smi-topo"
    assert [g.index for g in t.gpus] == list(range(8))
    assert [g.numa for g in t.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {format_cpulist(g.cpus) for g in t.gpus[:4]} == {cpus0}
    assert {format_cpulist(g.cpus) for g in t.gpus[4:]} == {cpus1}
    for g in t.gpus:
        assert g.nvlink_peers == tuple(i for i in range(8) if i != g.index)
        assert {lk.links for lk in g.nvlinks} == {links}
    assert t.nics == () and t.gpu_nic == {}
    assert format_cpulist(t.numa_cpus[0]) == cpus0 and format_cpulist(t.numa_cpus[1]) == cpus1
    j = report(t)
    assert j["gpus"][5]["numa"] == 1 and j["gpus"][5]["nearest_nics"] == []


def test_smi_two_gpus_without_numa(realdata: Path) -> None:
    t = _load(realdata, f"{SMI}/topo_m_2gpu_nv2.txt")
    assert [(g.index, g.numa, format_cpulist(g.cpus), g.nvlink_peers) for g in t.gpus] == [
        (0, None, "0-23", (1,)), (1, None, "0-23", (0,))]
    assert t.gpus[0].nvlinks[0].links == 2
    assert t.numa_cpus == {}


@pytest.mark.parametrize("name", ["topo_p2p_r_2xL4_cns.txt", "topo_p2p_r_8gpu_ok.txt"])
def test_smi_p2p_matrix_is_refused(realdata: Path, name: str) -> None:
    p = realdata / SMI / name
    with pytest.raises(ParseError, match="topo -p2p") as exc:
        parse_topology(p.read_bytes(), str(p))
    assert str(p) in str(exc.value)


def test_smi_truncated_matrix_is_partial(realdata: Path) -> None:
    p = realdata / SMI / "topo_m_8xH100_nv18_numa.txt"
    text = p.read_text()
    cut = "\n".join(text.splitlines()[:6])  # header + GPU0..GPU4, GPU4 row cut short below
    cut = cut[: cut.rfind("NV18")]
    t = parse_topo_matrix(cut, "cut")
    assert [g.index for g in t.gpus] == list(range(8))
    assert t.missing[0].startswith("GPU5–7 rows missing")
    assert any("GPU4: " in m and "cell(s) missing" in m for m in t.missing)
    assert t.gpus[7].numa is None and t.gpus[0].numa == 0


def test_smi_seventeen_nic_columns_with_legend_and_escapes() -> None:
    # 8 GPUs + 17 NICs in the R535 layout, header in bold as captured from a terminal
    base = dgx_like_topology()
    from dataclasses import replace

    from minutiae.model.topology import Nic
    nics = tuple(Nic(name=f"mlx5_{i}", numa=0 if i < 9 else 1) for i in range(17))
    gpu_nic = {(g.index, n.name): (PathType.PIX if n.name == f"mlx5_{g.index}" else PathType.SYS)
               for g in base.gpus for n in nics}
    t0 = replace(base, nics=nics, gpu_nic=gpu_nic)
    text = render_topo_matrix(t0)
    first, rest = text.split("\n", 1)
    text = "\x1b[4m" + first + "\x1b[0m\n" + rest
    t = parse_topo_matrix(text, "x")
    assert [n.name for n in t.nics] == [f"mlx5_{i}" for i in range(17)]
    assert _pairing(t)[3] == (("mlx5_3",), "PIX")
    assert t.gpu_nic[(0, "mlx5_16")] is PathType.SYS
    assert all(n.kind is NicKind.UNKNOWN for n in t.nics)  # topo -m does not say; never guessed
    assert t.notes == () and format_cpulist(t.gpus[4].cpus) == "56-111,168-223"


def test_smi_unknown_column_between_known_ones() -> None:
    text = ("\tGPU0\tGPU1\tFOO0\tNIC0\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV4\tzz\tPXB\t0-7\t0\n"
            "GPU1\tNV4\t X \tzz\tSYS\t8-15\t1\n"
            "NIC0\tPXB\tSYS\tzz\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n")
    t = parse_topo_matrix(text, "x")
    assert any("FOO0" in n for n in t.notes)
    assert _pairing(t) == {0: (("mlx5_0",), "PXB"), 1: (("mlx5_0",), "SYS")}
    assert [(g.numa, format_cpulist(g.cpus)) for g in t.gpus] == [(0, "0-7"), (1, "8-15")]


def test_smi_legacy_nic_names_as_columns() -> None:
    text = ("\tGPU0\tGPU1\tmlx5_0\tmlx5_1\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tSOC\tPIX\tSOC\t0-11\t0\n"
            "GPU1\tSOC\t X \tSOC\tPSB\t12-23\t1\n"
            "mlx5_0\tPIX\tSOC\t X \tSOC\n"
            "mlx5_1\tSOC\tPSB\tSOC\t X \n")
    t = parse_topo_matrix(text)
    assert _pairing(t) == {0: (("mlx5_0",), "PIX"), 1: (("mlx5_1",), "PXB")}
    assert t.gpus[0].nvlinks == ()


def test_smi_node_with_no_gpus() -> None:
    t = parse_topo_matrix("\tNIC0\tCPU Affinity\tNUMA Affinity\nNIC0\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n")
    assert t.gpus == () and [n.name for n in t.nics] == ["mlx5_0"]
    assert any("no GPU" in m for m in t.missing)


# --- NCCL topology XML -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["p4d-24xl-topo.xml", "p4de-24xl-topo.xml"])
def test_nccl_aws_p4d_pairs_share_a_switch_with_one_efa(realdata: Path, name: str) -> None:
    t = _load(realdata, f"nccl_topo/aws-ofi-nccl/{name}")
    want = {0: "0000:10:1b.0", 1: "0000:10:1b.0", 2: "0000:20:1b.0", 3: "0000:20:1b.0",
            4: "0000:90:1b.0", 5: "0000:90:1b.0", 6: "0000:a0:1b.0", 7: "0000:a0:1b.0"}
    assert _pairing(t) == {g: ((n,), "PIX") for g, n in want.items()}
    assert [g.pci for g in t.gpus][:2] == ["0000:10:1c.0", "0000:10:1d.0"]
    assert [g.numa for g in t.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert format_cpulist(t.gpus[0].cpus) == "0-23,48-71"
    assert format_cpulist(t.gpus[7].cpus) == "24-47,72-95"
    assert {n.kind for n in t.nics} == {NicKind.EFA}
    assert (t.gpus[0].pcie_gen, t.gpus[0].pcie_width) == (3, 16)
    assert t.gpu_nic[(0, "0000:20:1b.0")] is PathType.NODE
    assert t.gpu_nic[(0, "0000:90:1b.0")] is PathType.SYS
    assert any("named by PCI bus id" in m for m in t.missing)


def test_nccl_aws_p5_four_efa_per_gpu(realdata: Path) -> None:
    t = _load(realdata, "nccl_topo/aws-ofi-nccl/p5.48xl-topo.xml")
    assert len(t.gpus) == 8 and len(t.nics) == 32
    pairs = _pairing(t)
    assert pairs[0] == (("rdmap79s0", "rdmap80s0", "rdmap81s0", "rdmap82s0"), "PIX")
    assert pairs[7] == (("rdmap198s0", "rdmap199s0", "rdmap200s0", "rdmap201s0"), "PIX")
    assert all(len(v[0]) == 4 for v in pairs.values())
    # class 0x0200 without a PCI vendor: EFA or RoCE alike, so the kind is not stated (never
    # guessed from the rdmap name); `topo --plan --transport efa` says it
    assert {n.kind for n in t.nics} == {NicKind.UNKNOWN} and {n.rate_gbps for n in t.nics} == {100.0}
    assert {n.gdr for n in t.nics} == {True}
    assert (t.gpus[3].pci, t.gpus[3].pcie_gen, t.gpus[3].pcie_width) == ("0000:80:00.0", 5, 16)
    assert format_cpulist(t.numa_cpus[0]) == "0-47"


def test_nccl_azure_ndv4(realdata: Path) -> None:
    t = _load(realdata, "nccl_topo/azhpc-images/ndv4-topo.xml")
    pairs = _pairing(t)
    nic = {0: ("0101", "0102"), 1: ("0101", "0102"), 2: ("0103", "0104"), 3: ("0103", "0104"),
           4: ("0105", "0106"), 5: ("0105", "0106"), 6: ("0107", "0108"), 7: ("0107", "0108")}
    assert pairs == {g: (tuple(f"{x}:00:00.0" for x in v), "PIX") for g, v in nic.items()}
    assert [g.numa for g in t.gpus] == [1, 1, 0, 0, 3, 3, 2, 2]
    assert [format_cpulist(g.cpus) for g in t.gpus[::2]] == ["24-47", "0-23", "72-95", "48-71"]
    assert {n.kind for n in t.nics} == {NicKind.INFINIBAND}


def test_nccl_azure_ndv5_one_nic_per_gpu(realdata: Path) -> None:
    t = _load(realdata, "nccl_topo/azhpc-images/ndv5-topo.xml")
    assert _pairing(t) == {i: ((f"010{i + 1}:00:00.0",), "PIX") for i in range(8)}
    assert [g.pci for g in t.gpus][3:5] == ["0008:00:00.0", "0009:00:00.0"]
    assert [g.numa for g in t.gpus] == [0] * 4 + [1] * 4
    assert format_cpulist(t.gpus[4].cpus) == "48-95"
    assert (t.gpus[0].pcie_gen, t.nics[0].pcie_gen) == (5, 5)


def test_nccl_azure_ndv2_single_nic_far_from_half(realdata: Path) -> None:
    t = _load(realdata, "nccl_topo/azhpc-images/ndv2-topo.xml")
    pairs = _pairing(t)
    assert pairs == {i: (("0101:00:00.0",), "NODE" if i < 4 else "SYS") for i in range(8)}
    assert format_cpulist(t.numa_cpus[0]) == "0-19" and format_cpulist(t.numa_cpus[1]) == "20-39"


def test_nccl_azure_ncv4(realdata: Path) -> None:
    t = _load(realdata, "nccl_topo/azhpc-images/ncv4-topo.xml")
    assert [(g.index, g.numa, format_cpulist(g.cpus)) for g in t.gpus] == [
        (0, 0, "0-23"), (1, 1, "24-47"), (2, 2, "48-71"), (3, 3, "72-95")]
    assert _pairing(t) == {0: (("eth0",), "NODE"), 1: (("eth0",), "SYS"),
                           2: (("eth0",), "SYS"), 3: (("eth0",), "SYS")}
    assert t.gpus[0].nvlinks == () and len([n for n in t.notes if "itself" in n]) == 4
    assert t.gpus[0].pcie_width is None  # link_width="0" in the file means unknown


def test_nccl_aws_g5_has_no_gpu(realdata: Path) -> None:
    t = _load(realdata, "nccl_topo/aws-ofi-nccl/g5.48xl-topo.xml")
    assert t.gpus == () and sorted(t.numa_cpus) == [0, 1]
    assert "no GPU in this file" in t.missing


def test_nccl_graph_file_is_refused(realdata: Path) -> None:
    p = realdata / "nccl_topo/azhpc-images/ncv4-graph.xml"
    assert detect_format(p.read_bytes()) is TopoFormat.NCCL_XML
    with pytest.raises(ParseError, match="graph file"):
        parse_topology(p.read_bytes(), str(p))


def test_nccl_nvswitch_peers() -> None:
    xml = ('<system version="1"><cpu numaid="0" affinity="0000000f">'
           + "".join(f'<pci busid="0000:0{i}:00.0" class="0x030200"><gpu dev="{i}">'
                     '<nvlink target="0000:c0:00.0" count="6" tclass="0x068000"/></gpu></pci>'
                     for i in range(4)) + "</cpu></system>")
    t = parse_nccl_topo(xml)
    assert [g.nvlink_peers for g in t.gpus] == [(1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2)]
    assert {lk.links for lk in t.gpus[0].nvlinks} == {6}


def test_nccl_unknown_version_is_read_with_a_note() -> None:
    t = parse_nccl_topo('<system version="9"><cpu numaid="0" affinity="3"/></system>')
    assert any("version '9'" in n for n in t.notes)


# --- hwloc XML ---------------------------------------------------------------------------------

def test_hwloc_dgx2(realdata: Path) -> None:
    t = _load(realdata, "hwloc/xml/nvidiaDGX2.xml")
    assert t.source == "hwloc-xml-v3" and len(t.gpus) == 16
    assert [g.numa for g in t.gpus] == [0] * 8 + [1] * 8
    assert format_cpulist(t.gpus[0].cpus) == "0-1" and format_cpulist(t.gpus[15].cpus) == "24-25"
    assert t.gpus[0].pci == "0000:34:00.0" and t.gpus[15].pci == "0000:e7:00.0"
    assert t.gpus[0].model == "Tesla V100-SXM3-32GB-H"
    assert t.gpus[0].uuid == "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6"
    # the export links each baseboard's 8 GPUs to its 6 NVSwitches at 25 GB/s per link
    assert t.gpus[0].nvlink_peers == (1, 2, 3, 4, 5, 6, 7)
    assert t.gpus[8].nvlink_peers == (9, 10, 11, 12, 13, 14, 15)
    assert {lk.bandwidth_mbs for lk in t.gpus[0].nvlinks} == {150000.0}
    assert all(lk.via_switch for lk in t.gpus[3].nvlinks)
    assert t.facts["DMIProductName"] == "NVIDIA DGX-2H"
    assert t.nics == ()


def test_hwloc_power8_direct_nvlink_pairs(realdata: Path) -> None:
    t = _load(realdata, "hwloc/xml/power8gpudistances.xml")
    assert [g.nvlink_peers for g in t.gpus] == [(1,), (0,), (3,), (2,)]
    assert t.gpus[0].nvlinks[0].bandwidth_mbs == 40000.0 and not t.gpus[0].nvlinks[0].via_switch
    assert [g.numa for g in t.gpus] == [0, 0, 1, 1]
    assert format_cpulist(t.gpus[2].cpus) == "80-81,88-89,96-97,104-105"


def test_hwloc_gpu_nic_paths_from_the_pci_tree(realdata: Path) -> None:
    t = _load(realdata, "hwloc/xml/32em64t-2n8c2t-pci-wholeio.xml")
    assert [(g.index, g.pci, g.numa) for g in t.gpus] == [
        (0, "0000:03:00.0", 0), (1, "0000:83:00.0", 1), (2, "0000:84:00.0", 1), (3, "0000:84:00.1", 1)]
    ib = t.nic("mlx5_0")
    assert ib is not None and ib.state == "ACTIVE" and ib.netdev == "ib0" and ib.numa == 1
    assert t.gpu_nic[(2, "mlx5_0")] is PathType.PIX
    assert t.gpu_nic[(1, "mlx5_0")] is PathType.PHB
    assert t.gpu_nic[(0, "mlx5_0")] is PathType.SYS
    assert t.gpus[2].model == "Tesla K40m"


def test_hwloc_nvme_and_infiniband(realdata: Path) -> None:
    t = _load(realdata, "hwloc/linux/32em64t-2n8c+dax+nvme+mic+dimms.xml")
    assert [(d.name, d.pci, d.numa) for d in t.nvmes] == [("nvme0n1", "0000:00:02.0", 0)]
    assert [(n.name, n.numa, n.kind) for n in t.nics] == [
        ("eth0", 0, NicKind.ETHERNET), ("eth1", 0, NicKind.ETHERNET), ("mlx4_0", 1, NicKind.INFINIBAND)]
    assert "no GPU in this topology" in t.missing


def test_hwloc_v2_format(realdata: Path) -> None:
    t = _load(realdata, "hwloc/xml/cxlmem+dax.v2.xml")
    assert t.source == "hwloc-xml-v2"
    assert [n.name for n in t.nics] == ["enp0s2"] and t.gpus == ()  # the QEMU VGA is no GPU


def test_hwloc_every_real_file_parses(realdata: Path) -> None:
    files = sorted((realdata / "hwloc").rglob("*.xml"))
    assert len(files) >= 50
    for f in files:
        t = parse_hwloc_xml(f.read_bytes(), str(f))
        assert t.numa_cpus or t.missing, f


def test_hwloc_other_schema_version_is_refused(realdata: Path) -> None:
    p = realdata / "hwloc/xml/nvidiaDGX2.xml"
    data = p.read_bytes().replace(b'<topology version="3.0">', b'<topology version="4.0">')
    with pytest.raises(ParseError, match="version '4.0' is not supported"):
        parse_topology(data, str(p))


def test_hwloc_v1_layout() -> None:
    xml = b"""<?xml version="1.0"?><!DOCTYPE topology SYSTEM "hwloc.dtd"><topology>
    <object type="Machine" os_index="0" cpuset="0x0000000f" nodeset="0x00000003">
      <object type="NUMANode" os_index="1" cpuset="0x0000000c" nodeset="0x00000002">
        <object type="Bridge" bridge_type="0-1" bridge_pci="0000:[80-81]">
          <object type="PCIDev" pci_busid="0000:81:00.0" pci_type="0302 [10de:20b0] [10de:134f] a1">
            <object type="OSDev" name="cuda0" osdev_type="1"/></object>
          <object type="PCIDev" pci_busid="0000:81:00.1" pci_type="0207 [15b3:101b] [15b3:0007] 00">
            <object type="OSDev" name="mlx5_0" osdev_type="3"/></object>
        </object></object></object></topology>"""
    t = parse_topology(xml)
    assert t.source == "hwloc-xml-v1"
    assert [(g.numa, format_cpulist(g.cpus)) for g in t.gpus] == [(1, "2-3")]
    assert t.gpu_nic[(0, "mlx5_0")] is PathType.PHB


# --- detection and JSON round trip --------------------------------------------------------------

def test_unknown_format_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="unknown topology format") as exc:
        parse_topology(b"hello world\n", str(tmp_path / "x.txt"))
    assert "x.txt" in str(exc.value)
    with pytest.raises(ParseError, match="<html>"):
        parse_topology(b"<html><body/></html>", "page")


def test_json_round_trip(realdata: Path) -> None:
    t = _load(realdata, "nccl_topo/azhpc-images/ndv4-topo.xml")
    import json
    back = parse_topology(json.dumps(report(t)).encode(), "j")
    assert _pairing(back) == _pairing(t)
    assert [(g.index, g.numa, g.cpus, g.pci) for g in back.gpus] == [
        (g.index, g.numa, g.cpus, g.pci) for g in t.gpus]
    with pytest.raises(ParseError, match=r"gpus\[0\].numa"):
        topology_from_json({"gpus": [{"index": 0, "numa": "zero"}]}, "bad.json")


def test_json_nvlink_types_are_checked() -> None:
    good = {"gpus": [{"index": 0, "nvlinks": [{"peer": 1, "links": 18}]}]}
    assert topology_from_json(good).gpus[0].nvlinks[0].links == 18
    for bad in ({"peer": True, "links": 18}, {"peer": 1, "links": 18.0}, {"peer": "1"}, [1]):
        with pytest.raises(ParseError, match="nvlinks"):
            topology_from_json({"gpus": [{"index": 0, "nvlinks": [bad]}]}, "n.json")

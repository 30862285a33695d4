"""Issue 18 goal: on every capture of the test set, 0 wrong device names, 0 pinned-unknown ranks,
0 empty masks, all formats equal, for every transport, with and without --per-rank-nics.

The truth is read from each capture's raw text by this file's own small readers (ElementTree and
regular expressions, not minutiae's parsers): the RDMA device names the capture states (NCCL
``<net name>``, hwloc OpenFabrics OS devices, the ``NIC Legend`` of ``nvidia-smi topo -m``), and
per GPU its NUMA node and CPU set. A rank must be pinned inside its GPU's CPU set and bound to its
NUMA node when the capture gives them, and left unpinned when it does not."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from minutiae.analyses.topology.parse.detect import parse_topology
from minutiae.analyses.topology.plan import BindingPlan, Transport, make_plan
from minutiae.model.topology import NodeTopology
from minutiae.testing.topology import (
    assert_all_formats_agree,
    dgx_like_topology,
    render_topo_matrix,
)

DATA = Path(__file__).resolve().parents[2] / "data"
REAL = [*(f"nccl_topo/{p}" for p in ("aws-ofi-nccl/p4d-24xl-topo.xml", "aws-ofi-nccl/p4de-24xl-topo.xml",
                                     "aws-ofi-nccl/p5.48xl-topo.xml", "azhpc-images/ndv2-topo.xml",
                                     "azhpc-images/ndv4-topo.xml", "azhpc-images/ndv5-topo.xml",
                                     "azhpc-images/ncv4-topo.xml")),
        *(f"nvidia_smi/ml-engineering/{p}" for p in ("topo_m_8xA100_nv12_compact.txt",
                                                     "topo_m_8xH100_nv18_compact.txt",
                                                     "topo_m_8xH100_nv18_numa.txt", "topo_m_2gpu_nv2.txt")),
        "hwloc/xml/nvidiaDGX2.xml", "hwloc/xml/power8gpudistances.xml",
        "hwloc/xml/24em64t-2n6c2t-pci.xml"]
VENDORED = sorted(p.name for p in (DATA / "platforms" / "captures").glob("*.xml"))
TRANSPORTS = [None, Transport.IB, Transport.EFA, Transport.TCP]


@dataclass
class Truth:
    names: set[str]                      # RDMA device names the capture states
    numa: dict[str, int | None]          # GPU key (PCI id or "GPU<i>") -> NUMA node
    cpus: dict[str, set[int] | None]     # GPU key -> its CPU set (None: not given)


def _mask(text: str) -> set[int]:
    words = [w.strip() for w in text.split(",")]
    value = int("".join((w[2:] if w.lower().startswith("0x") else w).rjust(8, "0") for w in words), 16)
    return {i for i in range(value.bit_length()) if value >> i & 1}


def _nccl_truth(root: ET.Element) -> Truth:
    t = Truth({n.get("name", "") for n in root.iter("net") if n.get("name")}, {}, {})
    for cpu in root.iter("cpu"):
        numa = int(cpu.get("numaid")) if cpu.get("numaid") else None
        cpus = _mask(cpu.get("affinity", "")) if cpu.get("affinity") else None
        for pci in cpu.iter("pci"):
            if (pci.get("class") or "").startswith("0x03") or pci.find("gpu") is not None:
                key = (pci.get("busid") or "").lower()
                t.numa[key], t.cpus[key] = numa, cpus
    return t


def _hwloc_truth(root: ET.Element) -> Truth:
    t = Truth(set(), {}, {})

    def walk(e: ET.Element, numa: int | None, cpus: set[int] | None) -> None:
        for c in e.findall("object"):
            n, s = numa, cpus
            if c.get("nodeset") and c.get("type") not in ("NUMANode",):
                bits = _mask(c.get("nodeset", ""))
                n = next(iter(bits)) if len(bits) == 1 else None
            if c.get("type") not in ("NUMANode",) and c.get("cpuset"):
                s = _mask(c.get("cpuset", ""))
            if c.get("type") == "OSDev" and c.get("osdev_type") == "3":
                t.names.add(c.get("name", ""))
            pci_type = c.get("pci_type") or ""  # "0302 [10de:2901] ...": a display/3D function
            if c.get("type") == "PCIDev" and pci_type[:2] == "03" and (
                    pci_type[:4] in ("0302", "0380") or "[10de:" in pci_type):
                key = (c.get("pci_busid") or "").lower()
                t.numa[key], t.cpus[key] = n, s
            walk(c, n, s)
    walk(root, None, None)
    return t


def _cpulist(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def _matrix_truth(text: str) -> Truth:
    t = Truth(set(re.findall(r"^\s*NIC\d+\s*:\s*(\S+)\s*$", text, re.M)), {}, {})
    head = next(ln for ln in text.splitlines() if "GPU0" in ln and "CPU" in ln)
    cols = re.sub(r"CPU Affinity", "CPU_AFF", re.sub(r"NUMA Affinity", "NUMA_AFF", head)).split()
    for ln in text.splitlines():
        m = re.match(r"^(GPU\d+)\s", ln)
        if not m:
            continue
        cells = ln.split()[1:]
        row = dict(zip(cols, cells, strict=False))
        aff, numa = row.get("CPU_AFF"), row.get("NUMA_AFF")
        t.cpus[m.group(1)] = _cpulist(aff) if aff and re.fullmatch(r"[\d,-]+", aff) else None
        t.numa[m.group(1)] = int(numa) if numa and numa.isdigit() else None
    return t


def _truth(data: bytes) -> Truth:
    text = data.decode()
    if "<system" in text[:4096]:
        return _nccl_truth(ET.fromstring(text[text.index("<system"):]))
    if "<topology" in text[:4096]:
        return _hwloc_truth(ET.fromstring(data))
    return _matrix_truth(text)


def _key(t: NodeTopology, gpu: int) -> str:
    g = t.gpu(gpu)
    return (g.pci or "").lower() if g is not None and g.pci else f"GPU{gpu}"


def _named(plan: BindingPlan) -> set[str]:
    """Every device name the plan writes: the network variables and each rank's NICs."""
    out = {x for r in plan.ranks for x in r.nics}
    for env in [dict(plan.env), *(dict(r.env) for r in plan.ranks)]:
        out |= set(env.get("NCCL_IB_HCA", "").lstrip("^=").split(",")) - {""}
        out |= {x.split(":")[0] for x in env.get("UCX_NET_DEVICES", "").split(",") if x}
    return out


def _check(t: NodeTopology, truth: Truth, what: str) -> int:
    plans = 0
    for tr in TRANSPORTS:
        for per_rank in (False, True):
            plan = make_plan(t, transport=tr, per_rank_nics=per_rank)
            assert_all_formats_agree(plan)
            wrong = _named(plan) - truth.names
            assert not wrong, (what, tr, wrong)  # 0 wrong device names
            if plan.transport is Transport.EFA:
                assert not {"NCCL_IB_HCA", "UCX_NET_DEVICES"} & set(dict(plan.env))
            seen: set[int] = set()
            for r in plan.ranks:
                key = _key(t, r.gpu)
                cpus, numa = truth.cpus.get(key), truth.numa.get(key)
                if cpus is None:  # unknown in the capture: never pinned
                    assert r.cpus is None, (what, key, r)
                else:
                    assert r.cpus and set(r.cpus) <= cpus, (what, key, r.cpus)
                    assert not set(r.cpus) & set(plan.reserved)
                    assert not set(r.cpus) & seen or len(cpus - set(plan.reserved)) < len(plan.ranks)
                    seen |= set(r.cpus)
                assert r.mems == ((numa,) if numa is not None else ()), (what, key, r.mems, numa)
            plans += 1
    return plans


@pytest.mark.parametrize("rel", REAL)
def test_real_capture(realdata: Path, rel: str) -> None:
    data = (realdata / rel).read_bytes()
    assert _check(parse_topology(data, rel), _truth(data), rel) == 8


@pytest.mark.parametrize("name", VENDORED)
def test_vendored_platform_capture(name: str) -> None:
    data = (DATA / "platforms" / "captures" / name).read_bytes()
    assert _check(parse_topology(data, name), _truth(data), name) == 8


@pytest.mark.parametrize("legend", [True, False])
def test_rendered_matrix_with_and_without_legend(legend: bool) -> None:
    text = render_topo_matrix(dgx_like_topology())
    if not legend:
        text = text[:text.index("NIC Legend:")]
    t = parse_topology(text.encode(), "topo-m")
    _check(t, _matrix_truth(text), f"matrix legend={legend}")


def test_the_oracle_sees_what_it_should(realdata: Path) -> None:
    """The truth readers find the devices and CPU sets (an empty truth would pass anything)."""
    p5 = _truth((realdata / "nccl_topo/aws-ofi-nccl/p5.48xl-topo.xml").read_bytes())
    assert len(p5.names) == 32 and len(p5.cpus) == 8 and all(c == set(range(48)) for c in p5.cpus.values())
    b200 = _truth((DATA / "platforms/captures/p6-b200-hwloc-io.xml").read_bytes())
    assert len(b200.names) == 10 and sorted(b200.numa.values()) == [0, 0, 0, 0, 1, 1, 1, 1]
    h100 = _truth((realdata / "nvidia_smi/ml-engineering/topo_m_8xH100_nv18_numa.txt").read_bytes())
    assert h100.cpus["GPU0"] == set(range(52)) | set(range(104, 156)) and h100.numa["GPU7"] == 1
    assert _matrix_truth(render_topo_matrix(dgx_like_topology())).names == {f"mlx5_{i}" for i in range(8)}

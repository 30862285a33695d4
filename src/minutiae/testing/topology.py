"""Builders for topology tests and benchmarks: a sysfs-like tree on disk, a DGX-H100-like node
with knobs to plant faults, and ``nvidia-smi topo -m`` text rendered from a topology (the layout
of R535+ drivers: tab-separated, ``NIC#`` columns resolved by a ``NIC Legend``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from minutiae.model.topology import (
    Gpu,
    Nic,
    NicKind,
    NodeTopology,
    NvLink,
    Nvme,
    PathType,
    format_cpulist,
)


@dataclass
class SysfsDevice:
    busid: str
    chain: tuple[str, ...]  # ("pci0000:00", "0000:00:01.0", ...) bridges above the device
    cls: str
    vendor: str
    numa: int
    cpulist: str
    link: tuple[str, str, str, str] = ("32.0 GT/s PCIe", "16", "32.0 GT/s PCIe", "16")
    ib: str | None = None  # RDMA device name for NICs
    ib_rate: str = "400 Gb/sec (4X NDR)"
    ib_state: str = "4: ACTIVE"
    link_layer: str = "InfiniBand"
    fw: str = "28.41.1000"
    nvme: str | None = None
    netdev: str | None = None


@dataclass
class SysfsSpec:
    devices: list[SysfsDevice] = field(default_factory=list)
    numa: dict[int, str] = field(default_factory=dict)
    driver: str | None = "535.161.08"


def build_sysfs(root: Path, spec: SysfsSpec) -> Path:
    """Write ``spec`` as a sysfs tree under ``root`` (relative symlinks, as the kernel makes)."""
    for d in spec.devices:
        dev_dir = root / "devices" / Path(*d.chain) / d.busid
        dev_dir.mkdir(parents=True, exist_ok=True)
        for name, value in (("class", d.cls), ("vendor", d.vendor), ("numa_node", str(d.numa)),
                            ("local_cpulist", d.cpulist), ("current_link_speed", d.link[0]),
                            ("current_link_width", d.link[1]), ("max_link_speed", d.link[2]),
                            ("max_link_width", d.link[3])):
            (dev_dir / name).write_text(value + "\n")
        bus = root / "bus" / "pci" / "devices"
        bus.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(dev_dir, bus), bus / d.busid)
        if d.ib:
            ibc = root / "class" / "infiniband"
            ibc.mkdir(parents=True, exist_ok=True)
            ib_dir = dev_dir / "infiniband" / d.ib
            port = ib_dir / "ports" / "1"
            port.mkdir(parents=True)
            (port / "rate").write_text(d.ib_rate + "\n")
            (port / "state").write_text(d.ib_state + "\n")
            (port / "phys_state").write_text("5: LinkUp\n")
            (port / "link_layer").write_text(d.link_layer + "\n")
            (ib_dir / "fw_ver").write_text(d.fw + "\n")
            os.symlink(os.path.relpath(dev_dir, ib_dir), ib_dir / "device")
            os.symlink(os.path.relpath(ib_dir, ibc), ibc / d.ib)
            if d.netdev:
                (dev_dir / "net" / d.netdev).mkdir(parents=True)
        if d.nvme:
            nc = root / "class" / "nvme"
            nc.mkdir(parents=True, exist_ok=True)
            ctrl = dev_dir / "nvme" / d.nvme
            ctrl.mkdir(parents=True)
            os.symlink(os.path.relpath(dev_dir, ctrl), ctrl / "device")
            os.symlink(os.path.relpath(ctrl, nc), nc / d.nvme)
    for node, cpus in spec.numa.items():
        nd = root / "devices" / "system" / "node" / f"node{node}"
        nd.mkdir(parents=True, exist_ok=True)
        (nd / "cpulist").write_text(cpus + "\n")
    if spec.driver:
        (root / "module" / "nvidia").mkdir(parents=True, exist_ok=True)
        (root / "module" / "nvidia" / "version").write_text(spec.driver + "\n")
    return root


def dgx_like_spec(gpus: int = 8, cpus_per_numa: tuple[str, str] = ("0-55,112-167", "56-111,168-223"),
                  ) -> SysfsSpec:
    """A DGX-H100-like layout: per GPU one PCIe switch holding the GPU and one ConnectX NIC
    (PIX), half of the GPUs on each NUMA node, one NVMe per NUMA node."""
    spec = SysfsSpec(numa={0: cpus_per_numa[0], 1: cpus_per_numa[1]})
    for i in range(gpus):
        numa = 0 if i < gpus // 2 else 1
        hb = f"pci0000:{0x10 * (i + 1):02x}"
        rp = f"0000:{0x10 * (i + 1):02x}:01.0"
        up = f"0000:{0x10 * (i + 1) + 1:02x}:00.0"
        ds_g = f"0000:{0x10 * (i + 1) + 2:02x}:00.0"
        ds_n = f"0000:{0x10 * (i + 1) + 2:02x}:01.0"
        chain = (hb, rp, up)
        spec.devices.append(SysfsDevice(f"0000:{0x10 * (i + 1) + 3:02x}:00.0", (*chain, ds_g),
                                        "0x030200", "0x10de", numa, cpus_per_numa[numa]))
        spec.devices.append(SysfsDevice(f"0000:{0x10 * (i + 1) + 4:02x}:00.0", (*chain, ds_n),
                                        "0x020700", "0x15b3", numa, cpus_per_numa[numa],
                                        ib=f"mlx5_{i}", netdev=f"ibp{i}s0"))
    for j in range(2):
        spec.devices.append(SysfsDevice(f"0000:{0xa0 + 0x10 * j:02x}:00.0",
                                        (f"pci0000:{0xa0 + 0x10 * j:02x}", f"0000:{0xa0 + 0x10 * j:02x}:01.0"),
                                        "0x010802", "0x144d", j, cpus_per_numa[j], nvme=f"nvme{j}"))
    return spec


def dgx_like_topology(*, gpus: int = 8, nic_rate: float = 400.0, nic_state: str = "ACTIVE",
                      driver: str = "535.161.08", firmware: str = "28.41.1000",
                      gpu_pcie: tuple[int, int] = (5, 16), nvlinks: int = 18,
                      drop_nic: int | None = None, slow_nic: int | None = None,
                      numa_of_gpu: dict[int, int] | None = None) -> NodeTopology:
    """The same node as a ``NodeTopology`` (what ``minutiae topo --json`` would print on it)."""
    numa_cpus = {0: tuple(range(0, 56)) + tuple(range(112, 168)),
                 1: tuple(range(56, 112)) + tuple(range(168, 224))}
    gl = []
    nics = []
    gpu_nic: dict[tuple[int, str], PathType] = {}
    for i in range(gpus):
        numa = (numa_of_gpu or {}).get(i, 0 if i < 4 else 1)
        links = tuple(NvLink(peer=j, links=nvlinks) for j in range(gpus) if j != i)
        gl.append(Gpu(index=i, pci=f"0000:{0x10 * (i + 1) + 3:02x}:00.0", numa=numa,
                      cpus=numa_cpus[numa], nvlinks=links, model="NVIDIA H100 80GB HBM3",
                      pcie_gen=gpu_pcie[0], pcie_width=gpu_pcie[1], pcie_max_gen=5,
                      pcie_max_width=16))
    for i in range(8):
        if i == drop_nic:
            continue
        numa = 0 if i < 4 else 1
        nics.append(Nic(name=f"mlx5_{i}", pci=f"0000:{0x10 * (i + 1) + 4:02x}:00.0", numa=numa,
                        cpus=numa_cpus[numa], kind=NicKind.INFINIBAND,
                        rate_gbps=200.0 if i == slow_nic else nic_rate, state=nic_state, port=1,
                        link_layer="InfiniBand", firmware=firmware, pcie_gen=5, pcie_width=16,
                        pcie_max_gen=5, pcie_max_width=16))
    for g in gl:
        for n in nics:
            same = n.name == f"mlx5_{g.index}"
            gpu_nic[(g.index, n.name)] = (PathType.PIX if same else
                                          PathType.NODE if g.numa == n.numa else PathType.SYS)
    nvmes = (Nvme("nvme0", "0000:a0:00.0", 0), Nvme("nvme1", "0000:b0:00.0", 1))
    gpu_nvme = {(g.index, d.name): PathType.NODE if g.numa == d.numa else PathType.SYS
                for g in gl for d in nvmes}
    return NodeTopology(source="sysfs+nvidia-smi-topo", where="/sys", gpus=tuple(gl),
                        nics=tuple(nics), nvmes=nvmes, gpu_nic=gpu_nic, gpu_nvme=gpu_nvme,
                        numa_cpus=numa_cpus, facts={"driver": driver})


def render_topo_matrix(t: NodeTopology, nic_columns: bool = True) -> str:
    """``nvidia-smi topo -m`` text for ``t`` (R535+ layout: tabs, NIC# columns, legends)."""
    gpus = list(t.gpus)
    nics = list(t.nics) if nic_columns else []
    cols = [f"GPU{g.index}" for g in gpus] + [f"NIC{i}" for i in range(len(nics))]
    lines = ["\t" + "\t".join(cols) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]

    def gpu_cell(a: Gpu, b: Gpu) -> str:
        if a.index == b.index:
            return " X "
        link = next((lk for lk in a.nvlinks if lk.peer == b.index), None)
        if link is not None and link.links:
            return f"NV{link.links}"
        return "SYS" if a.numa != b.numa else "NODE"

    for g in gpus:
        cells = [gpu_cell(g, o) for o in gpus]
        cells += [t.gpu_nic.get((g.index, n.name), PathType.SYS).value for n in nics]
        numa = "N/A" if g.numa is None else str(g.numa)
        lines.append(f"GPU{g.index}\t" + "\t".join(cells)
                     + f"\t{format_cpulist(g.cpus) or 'N/A'}\t{numa}\t\tN/A")
    for i, n in enumerate(nics):
        cells = [t.gpu_nic.get((g.index, n.name), PathType.SYS).value for g in gpus]
        cells += [" X " if j == i else ("NODE" if m.numa == n.numa else "SYS")
                  for j, m in enumerate(nics)]
        lines.append(f"NIC{i}\t" + "\t".join(cells))
    lines += ["", "Legend:", "",
              "  X    = Self",
              "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA "
              "nodes (e.g., QPI/UPI)",
              "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host "
              "Bridges within a NUMA node",
              "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
              "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe "
              "Host Bridge)",
              "  PIX  = Connection traversing at most a single PCIe bridge",
              "  NV#  = Connection traversing a bonded set of # NVLinks"]
    if nics:
        lines += ["", "NIC Legend:", ""] + [f"  NIC{i}: {n.name}" for i, n in enumerate(nics)]
    return "\n".join(lines) + "\n"


def with_facts(t: NodeTopology, **facts: str) -> NodeTopology:
    return replace(t, facts={**t.facts, **facts})

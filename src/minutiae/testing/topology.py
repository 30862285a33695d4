"""Builders for topology tests and benchmarks: a sysfs-like tree on disk, a DGX-H100-like node
with knobs to plant faults, and ``nvidia-smi topo -m`` text rendered from a topology (the layout
of R535+ drivers: tab-separated, ``NIC#`` columns resolved by a ``NIC Legend``)."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from minutiae.analyses.topology.plan import BindingPlan
from minutiae.analyses.topology.render import PlanFormat, render
from minutiae.errors import ValidationError
from minutiae.model.topology import (
    Gpu,
    Nic,
    NicKind,
    NodeTopology,
    NvLink,
    Nvme,
    PathType,
    format_cpulist,
    parse_cpulist,
    parse_hexmask,
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


# --- decoding every plan format back to a binding (what its consumer would apply) -----------

NET = ("NCCL_IB_HCA", "UCX_NET_DEVICES", "FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA",
       "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME")


@dataclass(frozen=True)
class Bound:
    cpus: tuple[int, ...] | None
    mems: tuple[int, ...] | None  # None: this format cannot bind memory
    gpu: int
    net: tuple[tuple[str, str], ...]


def _bound(env: dict[str, str], rank: int, cpus: tuple[int, ...] | None,
           mems: tuple[int, ...] | None) -> Bound:
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    gpu = int(env["CUDA_VISIBLE_DEVICES"].split(",")[rank])
    return Bound(cpus, mems, gpu, tuple(sorted((k, v) for k, v in env.items() if k in NET)))


def _assignments(words: list[str]) -> dict[str, str]:
    return dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_][A-Z0-9_]*=", w))


def _numactl(words: list[str]) -> tuple[tuple[int, ...] | None, tuple[int, ...]]:
    cpus = next((parse_cpulist(w.split("=", 1)[1]) for w in words if w.startswith("--physcpubind=")), None)
    mems = next((tuple(map(int, w.split("=", 1)[1].split(","))) for w in words
                 if w.startswith("--membind=")), ())
    return cpus, mems


def _case_bodies(text: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"(?m)^\s*(\d+)\) (.*?) ;;$", text)}


def decode_exports(text: str, n: int) -> list[Bound]:
    glob = _assignments([ln[7:] for ln in text.splitlines() if ln.startswith("export ")])
    out = []
    for r, body in sorted(_case_bodies(text).items()):
        env = {**glob, **_assignments([w for w in shlex.split(body.replace(";", " ")) if w != "export"])}
        cpus = parse_cpulist(env["MINUTIAE_CPUS"]) if "MINUTIAE_CPUS" in env else None
        mems = tuple(map(int, env["MINUTIAE_MEMS"].split(","))) if "MINUTIAE_MEMS" in env else ()
        out.append(_bound(env, r, cpus, mems))
    assert len(out) == n
    return out


def decode_launchers(text: str, tool: str) -> list[Bound]:
    out = []
    for ln in text.splitlines():
        if not ln.endswith(" &"):
            continue
        words = shlex.split(ln[:-2])
        env = _assignments(words[words.index("env") + 1:])
        if tool == "numactl":
            cpus, mems = _numactl(words[:words.index("env")]) if words[0] == "numactl" else (None, ())
            out.append(_bound(env, int(env["LOCAL_RANK"]), cpus, mems))
        else:
            cpus = parse_cpulist(words[2]) if words[0] == "taskset" else None
            out.append(_bound(env, int(env["LOCAL_RANK"]), cpus, None))
    return out


def decode_slurm(text: str, n: int) -> list[Bound]:
    line = next(ln for ln in text.splitlines() if ln.startswith("srun "))
    words = shlex.split(line)
    opt = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words if w.startswith("--")}
    assert opt["--gpu-bind"] == "none" and int(opt["--ntasks-per-node"]) == n
    assert "0x0," not in opt["--cpu-bind"] + "," and not opt["--cpu-bind"].endswith(":")
    env = _assignments(words[words.index("env") + 1:])
    bodies = _case_bodies(words[words.index("-c") + 1].replace(";; ", " ;;\n").replace(" in ", " in\n"))\
        if "-c" in words else {}
    out = []
    for r in range(n):
        cpus: tuple[int, ...] | None = None
        mems: tuple[int, ...] = ()
        if opt["--cpu-bind"].startswith("mask_cpu:"):
            cpus = parse_hexmask(opt["--cpu-bind"].split(":", 1)[1].split(",")[r])
        if opt["--mem-bind"].startswith("map_mem:"):
            mems = (int(opt["--mem-bind"].split(":", 1)[1].split(",")[r]),)
        own = dict(env)
        if r in bodies:
            bw = shlex.split(bodies[r].replace(";", " "))
            own.update(_assignments(bw))
            if "numactl" in bw:
                cpus, mems = _numactl(bw)
        out.append(_bound(own, r, cpus, mems))
    return out


def decode_torchrun(text: str, n: int) -> list[Bound]:
    glob = _assignments([ln[7:] for ln in text.splitlines() if ln.startswith("export ")])
    out = []
    for r, body in sorted(_case_bodies(text).items()):
        env = {**glob, **_assignments([w for w in shlex.split(body.replace(";", " ")) if w != "export"])}
        cpus = parse_cpulist(env["CPUS"]) if env.get("CPUS") else None
        mems = tuple(map(int, env["MEMS"].split(","))) if env.get("MEMS") else ()
        out.append(_bound(env, r, cpus, mems))
    assert len(out) == n
    return out


def decoded(plan: BindingPlan) -> dict[str, list[Bound]]:
    n = len(plan.ranks)
    return {"exports": decode_exports(render(plan, PlanFormat.EXPORTS), n),
            "numactl": decode_launchers(render(plan, PlanFormat.NUMACTL), "numactl"),
            "taskset": decode_launchers(render(plan, PlanFormat.TASKSET), "taskset"),
            "slurm": decode_slurm(render(plan, PlanFormat.SLURM), n),
            "torchrun": decode_torchrun(render(plan, PlanFormat.TORCHRUN), n)}


def truth(plan: BindingPlan) -> list[Bound]:
    return [_bound(plan.rank_env(r), r.local_rank, r.cpus, r.mems) for r in plan.ranks]


def decode_systemd(text: str) -> dict[str, tuple[int, ...]]:
    """Each confining setting of the systemd output (``<section>/<key>`` of its drop-ins, as
    systemd reads them: ``AllowedCPUs=`` a cpulist, ``CPUAffinity=`` CPUs or ranges separated
    by spaces or commas) -> the CPUs it leaves to what it confines."""
    out: dict[str, tuple[int, ...]] = {}
    unit = section = ""
    for ln in text.splitlines():
        if m := re.match(r"^#.*?(/etc/systemd/[^\s:]+)", ln):
            unit = m.group(1)
        elif m := re.match(r"^\[(\w+)\]$", ln):
            section = m.group(1)
        elif m := re.match(r"^(AllowedCPUs|CPUAffinity)=(.+)$", ln):
            cpus = parse_cpulist(",".join(m.group(2).replace(",", " ").split()))
            out[f"{unit or section}:{section}/{m.group(1)}"] = cpus
    return out


def assert_systemd_agrees(plan: BindingPlan) -> None:
    """The systemd output confines services to exactly the plan's reserved CPUs, which no rank
    is pinned to; it names what each form pins; without reserved CPUs it refuses."""
    if not plan.reserved:
        try:
            render(plan, PlanFormat.SYSTEMD)
        except ValidationError:
            return
        raise AssertionError("systemd output without reserved CPUs")
    text = render(plan, PlanFormat.SYSTEMD)
    got = decode_systemd(text)
    assert len(got) == 4 and set(got.values()) == {plan.reserved}, got
    assert {k.split(":")[1] for k in got} == {"Slice/AllowedCPUs", "Manager/CPUAffinity",
                                              "Service/CPUAffinity"}
    assert all(r.cpus is None or not set(r.cpus) & set(plan.reserved) for r in plan.ranks)
    for said in ("system.slice", "user.slice", "sshd", "slurmd", "kubelet", "kubepods.slice"):
        assert said in text, said


def assert_all_formats_agree(plan: BindingPlan) -> None:
    assert_systemd_agrees(plan)
    want = truth(plan)
    for fmt, got in decoded(plan).items():
        if fmt == "taskset":  # taskset cannot bind memory; the script says so
            assert [Bound(b.cpus, None, b.gpu, b.net) for b in want] == got, fmt
            if any(r.mems for r in plan.ranks):
                assert "memory is NOT bound" in render(plan, PlanFormat.TASKSET)
        else:
            assert want == got, fmt
    for b in want:  # never an empty mask, never a column label as a device
        assert b.cpus is None or b.cpus
        assert not re.search(r"\bNIC\d+\b", " ".join(v for _, v in b.net))

"""Every plan format decodes to the same binding (issue 18 item 1): per local rank, the CPUs it
is pinned to (None: unpinned), the memory nodes, the GPU that ``cuda:<local rank>`` is under
``CUDA_VISIBLE_DEVICES`` with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and the network variables.
Each decoder reads the text the way its consumer does (shell words, srun options)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.analyses.topology.plan import BindingPlan, Transport, make_plan
from minutiae.analyses.topology.render import PlanFormat, render
from minutiae.model.topology import (
    Gpu,
    Nic,
    NicKind,
    NodeTopology,
    PathType,
    parse_cpulist,
    parse_hexmask,
)

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


def assert_all_formats_agree(plan: BindingPlan) -> None:
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


KINDS = [NicKind.INFINIBAND, NicKind.ETHERNET, NicKind.EFA, NicKind.UNKNOWN]


@st.composite
def topologies(draw: st.DrawFn) -> NodeTopology:
    n_numa = draw(st.integers(1, 2))
    per = draw(st.integers(1, 12))
    numa_cpus = {k: tuple(range(k * per, (k + 1) * per)) for k in range(n_numa)}
    n_gpus = draw(st.integers(1, 8))
    gpus = []
    for i in range(n_gpus):
        numa = draw(st.sampled_from([*range(n_numa), None]))
        cpus = numa_cpus[numa] if numa is not None and draw(st.booleans()) else ()
        gpus.append(Gpu(index=i, numa=numa, cpus=cpus))
    kind = draw(st.sampled_from(KINDS))
    names = draw(st.sampled_from([lambda i: f"mlx5_{i}", lambda i: f"rdmap{i}s0",
                                  lambda i: f"0000:{i + 16:02x}:00.0", lambda i: f"NIC{i}"]))
    nics = tuple(Nic(name=names(j), kind=kind, numa=j % n_numa, port=1,
                     netdev=f"eth{j}" if draw(st.booleans()) else None)
                 for j in range(draw(st.integers(0, 8))))
    paths = [PathType.PIX, PathType.PXB, PathType.PHB, PathType.NODE, PathType.SYS]
    gpu_nic = {(g.index, n.name): draw(st.sampled_from(paths)) for g in gpus for n in nics}
    src = "nvidia-smi-topo" if nics and nics[0].name.startswith("NIC") else "sysfs"
    return NodeTopology(source=src, gpus=tuple(gpus), nics=nics, gpu_nic=gpu_nic,
                        numa_cpus=numa_cpus if draw(st.booleans()) else {})


@settings(max_examples=150, deadline=None)
@given(topologies(), st.data())
def test_all_formats_decode_to_the_same_binding(t: NodeTopology, data: st.DataObject) -> None:
    ranks = data.draw(st.integers(1, len(t.gpus)))
    reserved = data.draw(st.sampled_from([None, (), (0,), (0, 1, 2)]))
    transport = data.draw(st.sampled_from([None, *Transport]))
    plan = make_plan(t, ranks, reserved, transport, data.draw(st.booleans()))
    assert_all_formats_agree(plan)
    if transport is Transport.EFA or plan.transport is Transport.EFA:
        assert not {"NCCL_IB_HCA", "UCX_NET_DEVICES"} & {k for b in truth(plan) for k, _ in b.net}


def test_decoders_can_fail() -> None:
    """The decoders see a real difference: a slurm mask list shifted by one rank."""
    from minutiae.testing.topology import dgx_like_topology

    plan = make_plan(dgx_like_topology())
    text = render(plan, PlanFormat.SLURM)
    m = re.search(r"mask_cpu:(\S+)", text)
    assert m
    masks = m.group(1).split(",")
    shifted = text.replace(m.group(1), ",".join(masks[1:] + masks[:1]))
    assert decode_slurm(shifted, 8) != truth(plan)
    assert decode_slurm(text, 8) == truth(plan)

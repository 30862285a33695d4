"""Every plan format decodes to the same binding (issue 18 item 1): per local rank, the CPUs it
is pinned to (None: unpinned), the memory nodes, the GPU that ``cuda:<local rank>`` is under
``CUDA_VISIBLE_DEVICES`` with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and the network variables.
Each decoder reads the text the way its consumer does (shell words, srun options)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.analyses.topology.placement import place_gpus
from minutiae.analyses.topology.plan import Transport, make_plan
from minutiae.analyses.topology.render import PlanFormat, render
from minutiae.model.topology import Gpu, Nic, NicKind, NodeTopology, PathType
from minutiae.testing.topology import assert_all_formats_agree, decode_slurm, truth

KINDS = [NicKind.INFINIBAND, NicKind.ETHERNET, NicKind.EFA, NicKind.UNKNOWN]


def _numa_layout(draw: st.DrawFn, n_numa: int, per: int) -> dict[int, tuple[int, ...]]:
    """Contiguous (0-11 / 12-23), interleaved (NUMA 0 = the even CPUs) or hyper-thread sibling
    blocks (0-5,12-17 / 6-11,18-23): the three numberings Linux machines show."""
    total = n_numa * per
    layout = draw(st.sampled_from(["contiguous", "interleaved", "siblings"]))
    if layout == "interleaved":
        return {k: tuple(range(k, total, n_numa)) for k in range(n_numa)}
    if layout == "siblings":
        return {k: tuple(range(k * per, (k + 1) * per)) + tuple(range(total + k * per, total + (k + 1) * per))
                for k in range(n_numa)}
    return {k: tuple(range(k * per, (k + 1) * per)) for k in range(n_numa)}


@st.composite
def topologies(draw: st.DrawFn) -> NodeTopology:
    n_numa = draw(st.integers(1, 2))
    per = draw(st.integers(1, 12))
    numa_cpus = _numa_layout(draw, n_numa, per)
    n_gpus = draw(st.integers(1, 8))
    gpus = []
    for i in range(n_gpus):
        numa = draw(st.sampled_from([*range(n_numa), None]))
        cpus = numa_cpus[numa] if numa is not None and draw(st.booleans()) else ()
        gpus.append(Gpu(index=i, numa=numa, cpus=cpus))
    names = draw(st.sampled_from([lambda i: f"mlx5_{i}", lambda i: f"rdmap{i}s0",
                                  lambda i: f"0000:{i + 16:02x}:00.0", lambda i: f"NIC{i}"]))
    nics = tuple(Nic(name=names(j), kind=draw(st.sampled_from(KINDS)), numa=j % n_numa, port=1,
                     netdev=f"eth{j}" if draw(st.booleans()) else None,
                     rdma=draw(st.sampled_from([None, True, False])),
                     gdr=draw(st.sampled_from([None, True, False])))
                 for j in range(draw(st.integers(0, 8))))
    paths = [PathType.PIX, PathType.PXB, PathType.PHB, PathType.NODE, PathType.SYS]
    gpu_nic = {(g.index, n.name): draw(st.sampled_from(paths)) for g in gpus for n in nics}
    src = "nvidia-smi-topo" if nics and nics[0].name.startswith("NIC") else "sysfs"
    return NodeTopology(source=src, gpus=tuple(gpus), nics=nics, gpu_nic=gpu_nic,
                        numa_cpus=numa_cpus if draw(st.booleans()) else {})


@settings(max_examples=300, deadline=None)
@given(topologies(), st.data())
def test_all_formats_decode_to_the_same_binding(t: NodeTopology, data: st.DataObject) -> None:
    ranks = data.draw(st.integers(1, len(t.gpus)))
    reserved = data.draw(st.sampled_from([None, (), (0,), (0, 1, 2)]))
    transport = data.draw(st.sampled_from([None, *Transport]))
    plan = make_plan(t, ranks, reserved, transport, data.draw(st.booleans()))
    assert_all_formats_agree(plan)
    placed = {pl.gpu.index: pl.cpus for pl in place_gpus(t)}
    seen: set[int] = set()
    for r in plan.ranks:  # pinned inside its GPU's CPUs, or unpinned when they are unknown
        assert (r.cpus is None) == (not set(placed[r.gpu]) - set(plan.reserved)), (r, plan.warnings)
        assert r.cpus is None or (r.cpus and set(r.cpus) <= set(placed[r.gpu]))
        if r.cpus and not any("share" in w for w in plan.warnings):
            assert not set(r.cpus) & seen  # disjoint unless the plan says they share
            seen |= set(r.cpus)
    kinds = {n.name: n.kind for n in t.nics}
    for r in plan.ranks:  # a rank's NICs are ones its transport can use
        assert plan.transport is not Transport.EFA or all(kinds[x] in (NicKind.EFA, NicKind.UNKNOWN)
                                                         for x in r.nics)
        assert plan.transport is not Transport.IB or all(kinds[x] is not NicKind.EFA for x in r.nics)
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

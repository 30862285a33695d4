"""The simulated fleet: racks, leaf switches, NVLink domains, nodes with one HCA per GPU, and
software versions with rollouts over time (pure; draws from a numpy Generator)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minutiae.sim.world.profile import Profile

#: PCI buses of the 8 GPUs and of the HCA beside each (same PCIe switch), H100 HGX style;
#: the HCA names follow the real snapshot (realdata sys-class-infiniband-h100.0).
GPU_BUS = ("19", "3b", "4c", "5d", "9b", "bb", "cb", "db")
HCA_BUS = ("1a", "3c", "4d", "5e", "9c", "bc", "cc", "dc")
HCA_NAMES = ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9")
SOFTWARE = ("driver", "kernel", "firmware", "nccl")
MAX_GPUS = 16


def gpu_bus(i: int) -> str:
    return GPU_BUS[i] if i < len(GPU_BUS) else f"{0x18 + 0x10 * i:02x}"


def hca_bus(i: int) -> str:
    return HCA_BUS[i] if i < len(HCA_BUS) else f"{0x19 + 0x10 * i:02x}"


def hca_name(i: int) -> str:
    return HCA_NAMES[i] if i < len(HCA_NAMES) else f"mlx5_{i + 2}"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    index: int
    rack: str
    leaf: str
    nvl_domain: str
    sku: str
    software: tuple[tuple[str, str], ...]   # state at start: (attr, version)


@dataclass(frozen=True, slots=True)
class Change:
    """One software change on one node (a row of rollouts.csv)."""

    time: float
    node: str
    attr: str
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class Fleet:
    nodes: tuple[Node, ...]
    gpus_per_node: int
    changes: tuple[Change, ...]

    def version_at(self, node: Node, attr: str, t: float) -> str:
        v = dict(node.software)[attr]
        for c in _changes_of(self, node.name, attr):
            if c.time > t:
                break
            v = c.new
        return v


_CHANGE_INDEX: dict[int, dict[tuple[str, str], list[Change]]] = {}


def _changes_of(fleet: Fleet, node: str, attr: str) -> list[Change]:
    """The node's changes of ``attr`` in time order (indexed once per fleet)."""
    idx = _CHANGE_INDEX.get(id(fleet.changes))
    if idx is None:
        idx = {}
        for c in fleet.changes:
            idx.setdefault((c.node, c.attr), []).append(c)
        _CHANGE_INDEX.clear()
        _CHANGE_INDEX[id(fleet.changes)] = idx
    return idx.get((node, attr), [])


def node_name(i: int, n: int) -> str:
    return f"gpu{i + 1:0{max(3, len(str(n)))}d}"


def build_fleet(profile: Profile, n_nodes: int, gpus_per_node: int, start: float,
                rng: np.random.Generator) -> Fleet:
    f = profile.fleet
    per_rack = int(f.get("nodes_per_rack", 4))
    per_leaf = per_rack * int(f.get("racks_per_leaf", 4))
    per_nvl = int(f.get("nvl_domain_nodes", 1))
    base = tuple((a, str(f.get(a, "unknown"))) for a in SOFTWARE)
    nodes = tuple(
        Node(name=node_name(i, n_nodes), index=i, rack=f"r{i // per_rack:03d}",
             leaf=f"leaf{i // per_leaf:02d}", nvl_domain=f"nvl{i // per_nvl:04d}",
             sku=str(f.get("sku", "GPU")), software=base)
        for i in range(n_nodes)
    )
    changes: list[Change] = []
    current = {(n.name, a): v for n in nodes for a, v in n.software}
    for ro in profile.rollouts:
        offsets = rng.uniform(0.0, max(ro.spread_hours, 0.0) * 3600.0, size=n_nodes)
        t0 = start + ro.at_day * 86400.0
        for node, off in zip(nodes, offsets, strict=True):
            old = current[(node.name, ro.attr)]
            if old != ro.new:
                changes.append(Change(float(t0 + off), node.name, ro.attr, old, ro.new))
                current[(node.name, ro.attr)] = ro.new
    changes.sort(key=lambda c: (c.time, c.node))
    return Fleet(nodes=nodes, gpus_per_node=gpus_per_node, changes=tuple(changes))

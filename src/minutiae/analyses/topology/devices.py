"""Which devices make a node's fingerprint attribute what it is (pure): ``--check`` names them
in every finding (``gpus.pcie is '5x8', expected '5x16'`` says which GPU, and its PCI id)."""

from __future__ import annotations

from collections.abc import Callable

from minutiae.analyses.topology.placement import place_gpus
from minutiae.analyses.topology.profile import Value, _pcie
from minutiae.model.topology import Gpu, Nic, NodeTopology, is_rdma

__all__ = ["culprits"]


def _gpu(g: Gpu) -> str:
    return f"GPU{g.index}" + (f" ({g.pci})" if g.pci else "")


def _nic(n: Nic) -> str:
    return n.name + (f" ({n.pci})" if n.pci and n.pci != n.name else "")


def _rdma(t: NodeTopology) -> list[Nic]:
    return [n for n in t.nics if is_rdma(n)]


def _gpus_where(t: NodeTopology, bad: Callable[[Gpu], bool]) -> list[str]:
    return [_gpu(g) for g in t.gpus if bad(g)]


def _nics_where(t: NodeTopology, bad: Callable[[Nic], bool]) -> list[str]:
    return [_nic(n) for n in _rdma(t) if bad(n)]


def _pairing(t: NodeTopology, expected: Value) -> list[str]:
    want = dict(p.split(">", 1) for p in str(expected).split(";") if ">" in p)
    out = []
    for p in place_gpus(t):
        got = "+".join(p.nearest_nics)
        if want.get(str(p.gpu.index)) not in (None, got):
            out.append(f"{_gpu(p.gpu)} nearest {got or 'none'}, expected {want[str(p.gpu.index)]}")
    return out


def _links(g: Gpu) -> int | None:
    counts = [lk.links for lk in g.nvlinks if lk.links is not None]
    return min(counts) if counts else None


def culprits(t: NodeTopology, key: str, expected: Value) -> list[str]:
    """The devices behind ``key``'s deviation from ``expected`` (empty: the whole node)."""
    e = str(expected)
    num = float(expected) if isinstance(expected, int | float) and not isinstance(expected, bool) else None
    checks: dict[str, Callable[[], list[str]]] = {
        "gpus.pcie": lambda: _gpus_where(t, lambda g: _pcie(g.pcie_gen, g.pcie_width) not in (None, e)),
        "gpus.model": lambda: _gpus_where(t, lambda g: g.model is not None and g.model != e),
        "gpus.nvlinks": lambda: _gpus_where(
            t, lambda g: num is not None and (_links(g) or 0) < num),
        "gpus.nvlink_peers": lambda: _gpus_where(
            t, lambda g: num is not None and len(g.nvlink_peers) < num),
        "gpus.local_nic": lambda: [_gpu(p.gpu) for p in place_gpus(t) if not p.gdr_local],
        "gpus.pairing": lambda: _pairing(t, expected),
        "gpus.count": lambda: [f"GPUs present: {','.join(str(g.index) for g in t.gpus) or 'none'}"],
        "gpus.per_numa": lambda: [f"{_gpu(g)} on NUMA {g.numa}" for g in t.gpus],
        "nics.rate_gbps": lambda: _nics_where(
            t, lambda n: num is not None and n.rate_gbps is not None and n.rate_gbps < num),
        "nics.state": lambda: _nics_where(t, lambda n: bool(n.state) and str(n.state).upper() != e),
        "nics.firmware": lambda: _nics_where(
            t, lambda n: n.firmware is not None and n.firmware not in e.split(",")),
        "nics.pcie": lambda: _nics_where(
            t, lambda n: _pcie(n.pcie_gen, n.pcie_width) not in (None, e)),
        "nics.count": lambda: [f"NICs present: {','.join(n.name for n in _rdma(t)) or 'none'}"],
        "nvme.count": lambda: [f"NVMe present: {','.join(d.name for d in t.nvmes) or 'none'}"],
    }
    fn = checks.get(key)
    return fn() if fn is not None else []

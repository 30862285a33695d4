"""The expected shape of a node: a profile (hand-written TOML or learned from the fleet) and the
fingerprint of one node in the same vocabulary (pure).

A profile is a flat set of attributes, written in TOML as sections::

    [profile]
    name = "dgx-h100"

    [gpus]
    count = 8                  # GPUs visible
    model = "NVIDIA H100 80GB HBM3"
    nvlinks = 18               # fewest bonded NVLinks between any two GPUs (NV18)
    nvlink_peers = 7           # fewest NVLink peers of any GPU
    pcie = "5x16"              # worst PCIe generation x width of any GPU
    per_numa = "0:4,1:4"       # GPUs per NUMA node
    local_nic = true           # every GPU has a NIC within PXB (GPUDirect RDMA)
    pairing = "0>mlx5_0;1>mlx5_1;…"   # nearest NIC of each GPU

    [nics]
    count = 8                  # RDMA devices
    names = "mlx5_0,mlx5_1,…"
    rate_gbps = 400            # slowest port (InfiniBand/EFA ports when there are any)
    state = "ACTIVE"           # worst port state
    firmware = "28.41.1000"    # all NIC firmware versions, comma-joined
    pcie = "5x16"

    [nvme]
    count = 4

    [software]
    driver = "535.161.08"

A key that is absent is not checked. A learned profile also has a ``[support]`` section: for
each attribute, the fraction of nodes that had the majority value.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field

from minutiae.analyses.topology.placement import place_gpus
from minutiae.errors import ConfigError
from minutiae.model.topology import NicKind, NodeTopology, is_rdma

Value = str | int | float | bool

#: attribute → (type, what a deviation means). The order is the order of the report.
ATTRIBUTES: dict[str, type] = {
    "gpus.count": int, "gpus.model": str, "gpus.nvlinks": int, "gpus.nvlink_peers": int,
    "gpus.pcie": str, "gpus.per_numa": str, "gpus.local_nic": bool, "gpus.pairing": str,
    "nics.count": int, "nics.names": str, "nics.rate_gbps": float, "nics.state": str,
    "nics.firmware": str, "nics.pcie": str, "nvme.count": int,
    "software.driver": str, "software.kernel": str, "software.vbios": str,
}
_STATE_ORDER = ["ACTIVE", "ARMED", "INIT", "DOWN"]


@dataclass(frozen=True, slots=True)
class Profile:
    """Expected attribute values; ``support`` (learned profiles only) is the fraction of nodes
    that had each value, ``nodes`` how many nodes it was learned from (0: hand-written)."""

    name: str
    expect: dict[str, Value]
    support: dict[str, float] = field(default_factory=dict)
    nodes: int = 0


def _pcie(gen: int | None, width: int | None) -> str | None:
    if gen is None and width is None:
        return None
    return f"{gen if gen is not None else '?'}x{width if width is not None else '?'}"


def _gpu_fp(t: NodeTopology, fp: dict[str, Value]) -> None:
    fp["gpus.count"] = len(t.gpus)
    models = {g.model for g in t.gpus if g.model}
    if len(models) == 1:
        fp["gpus.model"] = models.pop()
    elif models:
        fp["gpus.model"] = ",".join(sorted(models))
    links = [lk.links for g in t.gpus for lk in g.nvlinks if lk.links is not None]
    if links:
        fp["gpus.nvlinks"] = min(links)
    if t.gpus and any(g.nvlinks for g in t.gpus):
        fp["gpus.nvlink_peers"] = min(len(g.nvlink_peers) for g in t.gpus)
    elif t.source == "nvidia-smi-topo" and len(t.gpus) > 1:
        fp["gpus.nvlink_peers"] = 0
    pcies = [(g.pcie_gen or 0, g.pcie_width or 0) for g in t.gpus
             if g.pcie_gen is not None or g.pcie_width is not None]
    if pcies:
        worst = min(pcies)
        fp["gpus.pcie"] = _pcie(worst[0] or None, worst[1] or None) or ""
    if t.gpus and all(g.numa is not None for g in t.gpus):
        counts: dict[int, int] = {}
        for g in t.gpus:
            if g.numa is not None:
                counts[g.numa] = counts.get(g.numa, 0) + 1
        fp["gpus.per_numa"] = ",".join(f"{k}:{v}" for k, v in sorted(counts.items()))
    if t.nics and t.gpus:
        placements = place_gpus(t)
        if all(p.nearest_nics for p in placements):
            fp["gpus.local_nic"] = all(p.gdr_local for p in placements)
            fp["gpus.pairing"] = ";".join(f"{p.gpu.index}>{'+'.join(p.nearest_nics)}"
                                          for p in placements)


def _nic_fp(t: NodeTopology, fp: dict[str, Value]) -> None:
    rdma = [n for n in t.nics if is_rdma(n)]
    if t.source != "nvidia-smi-topo" or t.nics:
        fp["nics.count"] = len(rdma)
    if rdma:
        fp["nics.names"] = ",".join(sorted(n.name for n in rdma))
        fabric = [n for n in rdma if n.kind is not NicKind.ETHERNET] or rdma
        rates = [n.rate_gbps for n in fabric if n.rate_gbps is not None]
        if rates:
            fp["nics.rate_gbps"] = float(min(rates))
        states = [n.state.upper() for n in rdma if n.state]
        if states:
            fp["nics.state"] = max(states, key=lambda s: _STATE_ORDER.index(s)
                                   if s in _STATE_ORDER else len(_STATE_ORDER))
        fws = sorted({n.firmware for n in rdma if n.firmware})
        if fws:
            fp["nics.firmware"] = ",".join(fws)
        npcie = [(n.pcie_gen or 0, n.pcie_width or 0) for n in rdma
                 if n.pcie_gen is not None or n.pcie_width is not None]
        if npcie:
            w = min(npcie)
            fp["nics.pcie"] = _pcie(w[0] or None, w[1] or None) or ""


def fingerprint(t: NodeTopology) -> dict[str, Value]:
    """The node in profile vocabulary; attributes the source cannot tell are absent."""
    fp: dict[str, Value] = {}
    _gpu_fp(t, fp)
    _nic_fp(t, fp)
    if t.nvmes or t.source in ("sysfs", "hwloc-xml-v2", "hwloc-xml-v3"):
        fp["nvme.count"] = len(t.nvmes)
    for key, attr in (("driver", "software.driver"), ("kernel", "software.kernel"),
                      ("vbios", "software.vbios")):
        if t.facts.get(key):
            fp[attr] = t.facts[key]
    return fp


def _check_value(key: str, v: object, where: str) -> Value:
    typ = ATTRIBUTES[key]
    if typ is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if typ is int and isinstance(v, bool) or not isinstance(v, typ):
        raise ConfigError(f"{where}: {key} must be {typ.__name__}, got {v!r}")
    return v  # type: ignore[return-value]


def profile_from_toml(text: str, where: str = "profile") -> Profile:
    """Parse and validate a profile (unknown sections/keys are errors naming the key)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML ({exc})") from None
    name = str(doc.get("profile", {}).get("name", where))
    nodes = doc.get("profile", {}).get("learned_from", 0)
    expect: dict[str, Value] = {}
    support: dict[str, float] = {}
    for section, body in doc.items():
        if section == "profile":
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: [{section}] must be a table")
        if section == "support":
            for k, v in body.items():
                if k not in ATTRIBUTES or not isinstance(v, int | float) or not 0 <= v <= 1:
                    raise ConfigError(f"{where}: bad support entry {k} = {v!r}")
                support[k] = float(v)
            continue
        for k, v in body.items():
            key = f"{section}.{k}"
            if key not in ATTRIBUTES:
                known = ", ".join(a for a in ATTRIBUTES if a.startswith(section + ".")) or \
                    ", ".join(sorted({a.split('.')[0] for a in ATTRIBUTES}))
                raise ConfigError(f"{where}: unknown key {key} (known: {known})")
            expect[key] = _check_value(key, v, where)
    if not expect:
        raise ConfigError(f"{where}: the profile expects nothing")
    return Profile(name=name, expect=expect, support=support,
                   nodes=nodes if isinstance(nodes, int) else 0)


def _toml_value(v: Value) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def profile_to_toml(p: Profile) -> str:
    lines = ["# minutiae topology profile" + (f", learned from {p.nodes} node(s)" if p.nodes else ""),
             "[profile]", f"name = {_toml_value(p.name)}"]
    if p.nodes:
        lines.append(f"learned_from = {p.nodes}")
    sections: dict[str, list[str]] = {}
    for key in ATTRIBUTES:
        if key in p.expect:
            sec, _, k = key.partition(".")
            sections.setdefault(sec, []).append(f"{k} = {_toml_value(p.expect[key])}")
    for sec, body in sections.items():
        lines += ["", f"[{sec}]", *body]
    if p.support:
        lines += ["", "[support]  # fraction of nodes with the expected value"]
        lines += [f'"{k}" = {round(v, 4)!r}' for k, v in p.support.items()]
    return "\n".join(lines) + "\n"

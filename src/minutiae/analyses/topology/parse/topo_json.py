"""``NodeTopology`` ⇄ JSON (the object ``minutiae topo --json`` prints; ``--learn`` reads it back).

Contract (DESIGN.md): ``gpus`` (each with ``index``, ``numa`` or null, ``cpus`` list of ints,
``nearest_nics``) and ``nics`` (each with ``name``). ``nearest_nics`` is added by
``analyses.topology.report``; reading ignores it (it is recomputed).
"""

from __future__ import annotations

from array import array
from typing import Any

from minutiae.errors import ParseError
from minutiae.model.topology import Gpu, Nic, NicKind, NodeTopology, NvLink, Nvme, PathType

_GPU_FIELDS = ("pci", "model", "uuid", "pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width")
_NIC_FIELDS = ("pci", "rate_gbps", "state", "port", "link_layer", "firmware", "netdev", "gdr",
               "pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width", "rdma")


def _nvlink_json(lk: NvLink) -> dict[str, Any]:
    out: dict[str, Any] = {"peer": lk.peer, "links": lk.links}
    if lk.bandwidth_mbs is not None:
        out["bandwidth_mbs"] = lk.bandwidth_mbs
    if lk.via_switch:
        out["via_switch"] = True
    return out


#: validated NvLink records by their raw JSON values (a fleet repeats the same few thousand)
_NVLINKS: dict[tuple[Any, ...], NvLink] = {}


def _nvlink(lk: Any, w: str) -> NvLink:
    if not isinstance(lk, dict):
        raise ValueError(f"{w}.nvlinks: expected objects")
    raw = (lk.get("peer"), lk.get("links"), lk.get("bandwidth_mbs"), lk.get("via_switch"))
    key = (*raw, *map(type, raw))  # True and 1, 18 and 18.0 are equal keys otherwise
    try:
        hit = _NVLINKS.get(key)
    except TypeError:  # an unhashable value: validation below names it
        hit = None
    if hit is not None:
        return hit
    peer = _opt_int(raw[0], f"{w}.nvlinks.peer")
    if peer is None:
        raise ValueError(f"{w}.nvlinks.peer missing")
    link = NvLink(peer=peer, links=_opt_int(raw[1], f"{w}.nvlinks.links"),
                  bandwidth_mbs=_opt(raw[2], (int, float), f"{w}.nvlinks.bandwidth_mbs"),
                  via_switch=bool(_opt(raw[3], bool, f"{w}.nvlinks.via_switch")))
    if len(_NVLINKS) > 65536:
        _NVLINKS.clear()
    _NVLINKS[key] = link
    return link


def topology_to_json(t: NodeTopology) -> dict[str, Any]:
    return {
        "source": t.source,
        "where": t.where,
        "gpus": [
            {"index": g.index, "numa": g.numa, "cpus": list(g.cpus) if g.cpus else None,
             "nvlink_peers": list(g.nvlink_peers),
             "nvlinks": [_nvlink_json(lk) for lk in g.nvlinks],
             **{f: getattr(g, f) for f in _GPU_FIELDS}}
            for g in t.gpus
        ],
        "nics": [
            {"name": n.name, "numa": n.numa, "kind": n.kind.value,
             "cpus": list(n.cpus) if n.cpus else None,
             **{f: getattr(n, f) for f in _NIC_FIELDS}}
            for n in t.nics
        ],
        "nvmes": [{"name": d.name, "pci": d.pci, "numa": d.numa} for d in t.nvmes],
        "paths": {
            "gpu_nic": [{"gpu": g, "nic": n, "type": p.value} for (g, n), p in t.gpu_nic.items()],
            "gpu_nvme": [{"gpu": g, "nvme": n, "type": p.value}
                         for (g, n), p in t.gpu_nvme.items()],
        },
        "numa_cpus": {str(k): list(v) if v else None for k, v in t.numa_cpus.items()},
        "facts": dict(t.facts),
        "missing": list(t.missing),
        "notes": list(t.notes),
    }


def _opt_int(v: Any, what: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{what}: expected an integer or null, got {v!r}")
    return v


def _ints(v: Any, what: str) -> tuple[int, ...]:
    # array('q') checks every item is an integer at C speed (CPU lists are long: 200+ items)
    if v is None:  # unknown CPU set
        return ()
    try:
        if not isinstance(v, list):
            raise TypeError
        array("q", v)
    except (TypeError, OverflowError):
        raise ValueError(f"{what}: expected a list of integers") from None
    return tuple(v)


def _opt(v: Any, typ: type | tuple[type, ...], what: str) -> Any:
    if v is None or isinstance(v, typ) and not isinstance(v, bool) or typ is bool and isinstance(v, bool):
        return v
    raise ValueError(f"{what}: unexpected value {v!r}")


_PATHS = {p.value: p for p in PathType}


def _path(v: Any) -> PathType:
    return _PATHS.get(v) or PathType.parse(str(v))


def topology_from_json(obj: Any, where: str | None = None) -> NodeTopology:
    """Rebuild a topology from ``topology_to_json`` output; ParseError naming the bad field."""
    try:
        if not isinstance(obj, dict) or not isinstance(obj.get("gpus"), list):
            raise ValueError("expected an object with a 'gpus' list (minutiae topo --json)")
        gpus = []
        for i, g in enumerate(obj["gpus"]):
            w = f"gpus[{i}]"
            if not isinstance(g, dict):
                raise ValueError(f"{w}: expected an object")
            idx = _opt_int(g.get("index"), f"{w}.index")
            if idx is None:
                raise ValueError(f"{w}.index missing")
            links = tuple(_nvlink(lk, w) for lk in g.get("nvlinks") or [])
            if not links and g.get("nvlink_peers"):
                links = tuple(NvLink(peer=p) for p in _ints(g["nvlink_peers"], f"{w}.nvlink_peers"))
            gpus.append(Gpu(
                index=idx, numa=_opt_int(g.get("numa"), f"{w}.numa"),
                cpus=_ints(g.get("cpus", []), f"{w}.cpus"), nvlinks=links,
                pci=_opt(g.get("pci"), str, f"{w}.pci"), model=_opt(g.get("model"), str, f"{w}.model"),
                uuid=_opt(g.get("uuid"), str, f"{w}.uuid"),
                pcie_gen=_opt_int(g.get("pcie_gen"), f"{w}.pcie_gen"),
                pcie_width=_opt_int(g.get("pcie_width"), f"{w}.pcie_width"),
                pcie_max_gen=_opt_int(g.get("pcie_max_gen"), f"{w}.pcie_max_gen"),
                pcie_max_width=_opt_int(g.get("pcie_max_width"), f"{w}.pcie_max_width"),
            ))
        nics = []
        for i, n in enumerate(obj.get("nics") or []):
            w = f"nics[{i}]"
            if not isinstance(n, dict) or not isinstance(n.get("name"), str):
                raise ValueError(f"{w}: expected an object with a 'name'")
            try:
                kind = NicKind(n.get("kind") or "unknown")
            except ValueError:
                kind = NicKind.UNKNOWN
            nics.append(Nic(
                name=n["name"], numa=_opt_int(n.get("numa"), f"{w}.numa"),
                cpus=_ints(n.get("cpus", []), f"{w}.cpus"), kind=kind,
                pci=_opt(n.get("pci"), str, f"{w}.pci"),
                rate_gbps=_opt(n.get("rate_gbps"), (int, float), f"{w}.rate_gbps"),
                state=_opt(n.get("state"), str, f"{w}.state"),
                port=_opt_int(n.get("port"), f"{w}.port"),
                link_layer=_opt(n.get("link_layer"), str, f"{w}.link_layer"),
                firmware=_opt(n.get("firmware"), str, f"{w}.firmware"),
                netdev=_opt(n.get("netdev"), str, f"{w}.netdev"),
                gdr=_opt(n.get("gdr"), bool, f"{w}.gdr"),
                pcie_gen=_opt_int(n.get("pcie_gen"), f"{w}.pcie_gen"),
                pcie_width=_opt_int(n.get("pcie_width"), f"{w}.pcie_width"),
                pcie_max_gen=_opt_int(n.get("pcie_max_gen"), f"{w}.pcie_max_gen"),
                pcie_max_width=_opt_int(n.get("pcie_max_width"), f"{w}.pcie_max_width"),
                rdma=_opt(n.get("rdma"), bool, f"{w}.rdma"),
            ))
        nvmes = [Nvme(name=str(d["name"]), pci=d.get("pci"), numa=_opt_int(d.get("numa"), "nvmes"))
                 for d in obj.get("nvmes") or []]
        paths = obj.get("paths") or {}
        gpu_nic = {(int(p["gpu"]), str(p["nic"])): _path(p["type"])
                   for p in paths.get("gpu_nic") or []}
        gpu_nvme = {(int(p["gpu"]), str(p["nvme"])): _path(p["type"])
                    for p in paths.get("gpu_nvme") or []}
        numa_cpus = {int(k): _ints(v, f"numa_cpus[{k}]")
                     for k, v in (obj.get("numa_cpus") or {}).items()}
        facts = {str(k): str(v) for k, v in (obj.get("facts") or {}).items() if v is not None}
        return NodeTopology(
            source=str(obj.get("source") or "minutiae-json"), where=where or obj.get("where"),
            gpus=tuple(gpus), nics=tuple(nics), nvmes=tuple(nvmes), gpu_nic=gpu_nic,
            gpu_nvme=gpu_nvme, numa_cpus=numa_cpus, facts=facts,
            missing=tuple(str(m) for m in obj.get("missing") or []),
            notes=tuple(str(m) for m in obj.get("notes") or []),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ParseError(f"not a minutiae topology JSON: {exc}", where) from None

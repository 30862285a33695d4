"""``nvidia-smi topo -m`` (and ``topo --matrix``) text → ``NodeTopology`` (pure).

The matrix has one header line of device columns (``GPU0 … GPUn``, then NICs either as
``NIC0 … NICk`` resolved by the ``NIC Legend:`` block, or by name in older drivers such as
``mlx5_0``), then the trailing columns ``CPU Affinity``, ``NUMA Affinity`` and, since R535,
``GPU NUMA ID``. Cells are ``X`` (self), ``NV#`` (# bonded NVLinks), ``PIX``, ``PXB``, ``PHB``,
``NODE``, ``SYS`` (``SOC``/``PSB`` in old drivers). Separators are tabs or runs of spaces; the
header may carry terminal escapes (bold/underline) when captured from a tty.

Truncated input gives a partial answer whose ``missing`` says which rows or cells are absent;
unknown trailing columns are ignored and named in ``notes``.
"""

from __future__ import annotations

import re

from minutiae.errors import ParseError
from minutiae.model.topology import (
    Gpu,
    Nic,
    NodeTopology,
    NvLink,
    PathType,
    nic_kind_from_name,
    parse_cpulist,
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MULTI = {"CPU Affinity": "CPU_AFFINITY", "NUMA Affinity": "NUMA_AFFINITY",
          "GPU NUMA ID": "GPU_NUMA_ID"}
_GPU = re.compile(r"GPU(\d+)")
_NICN = re.compile(r"NIC(\d+)")
_LEGEND_NIC = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_CELL = re.compile(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|PSB", re.IGNORECASE)
#: device names that old drivers print as matrix columns instead of NIC#
_NIC_NAME = re.compile(r"(mlx\d+_\w+|ib\w*\d+|bnxt_re\d+|efa_?\d+|rdmap\w+|irdma\d+|qedr\d+|"
                       r"hfi\d+_\d+|eth\d+|en\w+\d+|rocep\w+|ionic_\d+|erdma_\d+)")


def looks_like_topo_matrix(text: str) -> bool:
    head = _ANSI.sub("", text[:4096])
    for line in head.splitlines():
        if line.strip():
            return bool(re.match(r"^\s*GPU0\b", line)) or "CPU Affinity" in line
    return False


def _header_tokens(line: str) -> list[str]:
    line = _ANSI.sub("", line)
    for k, v in _MULTI.items():
        line = line.replace(k, v)
    return line.split()


def parse_topo_matrix(text: str, where: str | None = None) -> NodeTopology:
    """Parse one ``nvidia-smi topo -m`` capture. Raises ParseError when no matrix header is found."""
    lines = [_ANSI.sub("", raw).rstrip("\r\n") for raw in text.splitlines()]
    hdr_i = next((i for i, ln in enumerate(lines)
                  if ln.strip() and (_header_tokens(ln)[:1] in (["GPU0"], ["NIC0"])
                                     or "CPU Affinity" in ln)), None)
    if hdr_i is None:
        raise ParseError("not an nvidia-smi topo -m matrix (no header line with GPU0 / CPU Affinity)",
                         where)
    header = _header_tokens(lines[hdr_i])
    trailing_known = {"CPU_AFFINITY", "NUMA_AFFINITY", "GPU_NUMA_ID"}
    dev_cols = [h for h in header if h not in trailing_known]
    notes: list[str] = []
    missing: list[str] = []
    # NIC legend anywhere below the matrix
    legend: dict[str, str] = {}
    for ln in lines[hdr_i + 1:]:
        m = _LEGEND_NIC.match(ln)
        if m:
            legend[m.group(1)] = m.group(2)
    # split device columns from unknown trailing ones: device columns are those that also label rows
    rows: dict[str, list[str]] = {}
    for ln in lines[hdr_i + 1:]:
        toks = ln.split()
        if not toks or toks[0].endswith(":") or ln.strip().startswith("Legend"):
            if toks[:1] == ["Legend:"]:
                break
            continue
        if toks[0] in dev_cols and toks[0] not in rows:
            rows[toks[0]] = toks[1:]
    p2p = {"OK", "CNS", "GNS", "TNS", "NS", "U"}
    if not tail_cols_present(header) and any(c in p2p for cells in rows.values() for c in cells):
        raise ParseError("this is an nvidia-smi topo -p2p status matrix, not topo -m "
                         "(no path types or CPU affinity in it)", where)
    unknown_cols = [h for h in dev_cols if not (_GPU.fullmatch(h) or _NICN.fullmatch(h)
                                                or _NIC_NAME.fullmatch(h) or h in rows)]
    devices = [h for h in dev_cols if h not in unknown_cols]
    if unknown_cols:
        notes.append(f"ignored unknown column(s): {', '.join(unknown_cols)}")
    tail_cols = [h for h in header if h in trailing_known]
    gpu_cols = [h for h in devices if _GPU.fullmatch(h)]
    nic_cols = [h for h in devices if not _GPU.fullmatch(h)]
    if not gpu_cols:
        missing.append("no GPU columns: node with no GPUs visible to nvidia-smi")

    def nic_name(col: str) -> str:
        if _NICN.fullmatch(col):
            if col in legend:
                return legend[col]
            missing.append(f"{col}: name not in the NIC Legend (kept as {col})")
        return col

    nic_names = {c: nic_name(c) for c in nic_cols}
    gpus: list[Gpu] = []
    gpu_nic: dict[tuple[int, str], PathType] = {}
    numa_cpus: dict[int, set[int]] = {}
    pos: dict[str, int] = {}
    for i, h in enumerate(header):
        pos.setdefault(h, i)  # cells are positional: unknown columns keep their place
    for col in gpu_cols:
        idx = int(_GPU.fullmatch(col).group(1))  # type: ignore[union-attr]
        cells = rows.get(col)
        if cells is None:
            missing.append(f"{col}: row missing (truncated matrix?)")
            gpus.append(Gpu(index=idx))
            continue
        absent = [d for d in devices if pos[d] >= len(cells)]
        if absent:
            missing.append(f"{col}: {len(absent)} cell(s) missing (truncated row?)")
        nvlinks: list[NvLink] = []
        for other in devices:
            j = pos[other]
            if j >= len(cells) or other == col:
                continue
            cell = cells[j]
            if not _CELL.fullmatch(cell):
                notes.append(f"{col}/{other}: unexpected cell {cell!r}")
                continue
            path = PathType.parse(cell)
            if _GPU.fullmatch(other) and path is PathType.NV:
                nvlinks.append(NvLink(peer=int(other[3:]), links=int(cell[2:])))
            elif other in nic_names:
                gpu_nic[(idx, nic_names[other])] = path
        tail = {h: cells[pos[h]] for h in tail_cols if pos[h] < len(cells)}
        cpus: tuple[int, ...] = ()
        numa: int | None = None
        cpu_text = tail.get("CPU_AFFINITY")
        if cpu_text is None:
            missing.append(f"{col}: CPU Affinity missing")
        elif cpu_text.upper() != "N/A":
            try:
                cpus = parse_cpulist(cpu_text)
            except ValueError:
                notes.append(f"{col}: unreadable CPU Affinity {cpu_text!r}")
        numa_text = tail.get("NUMA_AFFINITY")
        if numa_text is None:
            missing.append(f"{col}: NUMA Affinity missing")
        elif numa_text.isascii() and numa_text.isdigit():
            numa = int(numa_text)
        elif numa_text.upper() != "N/A":
            notes.append(f"{col}: unreadable NUMA Affinity {numa_text!r}")
        if numa is not None and cpus:
            numa_cpus.setdefault(numa, set()).update(cpus)
        gpus.append(Gpu(index=idx, numa=numa, cpus=cpus, nvlinks=tuple(nvlinks)))
    nics: list[Nic] = []
    for col in nic_cols:
        if col not in rows:
            missing.append(f"{col}: row missing (truncated matrix?)")
        name = nic_names[col]
        nics.append(Nic(name=name, kind=nic_kind_from_name(name)))
    missing.append("PCI bus ids, NIC rate/state and NVMe drives are not in nvidia-smi topo -m")
    return NodeTopology(
        source="nvidia-smi-topo",
        where=where,
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        nics=tuple(nics),
        gpu_nic=gpu_nic,
        numa_cpus={k: tuple(sorted(v)) for k, v in sorted(numa_cpus.items())},
        missing=tuple(missing),
        notes=tuple(notes),
    )


def tail_cols_present(header: list[str]) -> bool:
    return any(h in ("CPU_AFFINITY", "NUMA_AFFINITY") for h in header)

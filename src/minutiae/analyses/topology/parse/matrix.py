"""``nvidia-smi topo -m`` (and ``topo --matrix``) text → ``NodeTopology`` (pure).

The matrix has one header line of device columns (``GPU0 … GPUn``, then NICs either as
``NIC0 … NICk`` resolved by the ``NIC Legend:`` block, or by name in older drivers such as
``mlx5_0``), then the trailing columns ``CPU Affinity``, ``NUMA Affinity`` and, since R535,
``GPU NUMA ID``. Cells are ``X`` (self), ``NV#`` (# bonded NVLinks), ``PIX``, ``PXB``, ``PHB``,
``NODE``, ``SYS`` (``SOC``/``PSB`` in old drivers). Separators are tabs or runs of spaces; the
header may carry terminal escapes (bold/underline) when captured from a tty.

Pasted captures are read as people paste them: a prompt/command line (``$ nvidia-smi topo -m``)
is skipped, and a comment prefix common to every line (``# `` of a script header, ``> `` of a
quote) is removed. A paste that lost its header row is refused: the columns cannot be known,
and no GPU is made up. A truncated paste gives a partial answer whose ``missing`` says which
rows or cells are absent (``GPU4–7 rows missing``); unknown trailing columns are ignored and
named in ``notes``. NIC names come only from the legend (or from old drivers' name columns);
their kind is not in this format and stays UNKNOWN.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from minutiae.errors import ParseError
from minutiae.model.topology import Gpu, Nic, NodeTopology, NvLink, PathType, parse_cpulist

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MULTI = {"CPU Affinity": "CPU_AFFINITY", "NUMA Affinity": "NUMA_AFFINITY",
          "GPU NUMA ID": "GPU_NUMA_ID"}
_TRAILING = {"CPU_AFFINITY", "NUMA_AFFINITY", "GPU_NUMA_ID"}
_GPU = re.compile(r"GPU(\d+)")
_NICN = re.compile(r"NIC(\d+)")
_LEGEND_NIC = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_CELL = re.compile(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|PSB", re.IGNORECASE)
#: device names that old drivers print as matrix columns instead of NIC#
_NIC_NAME = re.compile(r"(mlx\d+_\w+|ib\w*\d+|bnxt_re\d+|efa_?\d+|rdmap\w+|irdma\d+|qedr\d+|"
                       r"hfi\d+_\d+|eth\d+|en\w+\d+|rocep\w+|ionic_\d+|erdma_\d+)")
#: a comment/quote marker that may prefix every line of a paste
_PREFIX = re.compile(r"^[ \t]*(#+|>+|//|;+|--)[ ]?")
#: a shell prompt or the command itself, pasted above the matrix
_PROMPT = re.compile(r"\bnvidia-smi\b|^\s*[$%]\s|^\S+@\S+.*?[$#%]\s")
_P2P = {"OK", "CNS", "GNS", "TNS", "NS", "U"}


def clean_paste(text: str) -> list[str]:
    """The lines of a capture as the tool printed them: terminal escapes removed, a comment
    prefix shared by every non-blank line removed, prompt/command lines dropped."""
    lines = [_ANSI.sub("", raw).rstrip("\r\n") for raw in text.splitlines()]
    body = [ln for ln in lines if ln.strip()]
    marks = {m.group(1)[:2] if (m := _PREFIX.match(ln)) else None for ln in body}
    if body and len(marks) == 1 and None not in marks:
        lines = [_PREFIX.sub("", ln, count=1) for ln in lines]
    return [ln for ln in lines if not _PROMPT.search(ln)]


def _header_tokens(line: str) -> list[str]:
    for k, v in _MULTI.items():
        line = line.replace(k, v)
    return line.split()


def _is_header(tokens: list[str]) -> bool:
    """A header names devices; a matrix row starts with a device label and then cells."""
    if not tokens or tokens[0] not in ("GPU0", "NIC0") and "CPU_AFFINITY" not in tokens:
        return False
    return len(tokens) < 2 or not _CELL.fullmatch(tokens[1])


def looks_like_topo_matrix(text: str) -> bool:
    for line in clean_paste(text[:8192]):
        if line.strip():
            toks = _header_tokens(line)
            return bool(re.match(r"^\s*GPU0\b", line)) or "CPU_AFFINITY" in toks
    return False


def _find_header(lines: list[str], where: str | None) -> int:
    for i, ln in enumerate(lines):
        toks = _header_tokens(ln)
        if _is_header(toks):
            return i
        if toks[:1] == ["GPU0"]:
            raise ParseError("nvidia-smi topo -m paste without its header row (GPU0 GPU1 … CPU "
                             "Affinity): its columns cannot be known; paste the whole output",
                             where)
    raise ParseError("not an nvidia-smi topo -m matrix (no header line with GPU0 / CPU Affinity)",
                     where)


def _rows(lines: list[str], dev_cols: list[str]) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for ln in lines:
        toks = ln.split()
        if toks[:1] == ["Legend:"]:
            break
        if not toks or toks[0].endswith(":"):
            continue
        if toks[0] in dev_cols and toks[0] not in rows:
            rows[toks[0]] = toks[1:]
    return rows


def _ranges(indices: list[int]) -> str:
    """[4, 5, 6, 7, 9] → ``GPU4–7, GPU9``."""
    out: list[str] = []
    for i in sorted(indices):
        if out and i == int(re.findall(r"\d+", out[-1])[-1]) + 1:
            out[-1] = f"{out[-1].split('–')[0]}–{i}"
        else:
            out.append(f"GPU{i}")
    return ", ".join(out)


@dataclass
class _Acc:
    gpus: list[Gpu] = field(default_factory=list)
    gpu_nic: dict[tuple[int, str], PathType] = field(default_factory=dict)
    numa_cpus: dict[int, set[int]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _affinity(col: str, tail: dict[str, str], acc: _Acc) -> tuple[tuple[int, ...], int | None]:
    cpus: tuple[int, ...] = ()
    numa: int | None = None
    cpu_text = tail.get("CPU_AFFINITY")
    if cpu_text is None:
        acc.missing.append(f"{col}: CPU Affinity missing")
    elif cpu_text.upper() != "N/A":
        try:
            cpus = parse_cpulist(cpu_text)
        except ValueError:
            acc.notes.append(f"{col}: unreadable CPU Affinity {cpu_text!r}")
    numa_text = tail.get("NUMA_AFFINITY")
    if numa_text is None:
        acc.missing.append(f"{col}: NUMA Affinity missing")
    elif numa_text.isascii() and numa_text.isdigit():
        numa = int(numa_text)
    elif numa_text.upper() != "N/A":
        acc.notes.append(f"{col}: unreadable NUMA Affinity {numa_text!r}")
    return cpus, numa


def _gpu_row(col: str, cells: list[str], devices: list[str], pos: dict[str, int],
             nic_names: dict[str, str], tail_cols: list[str], acc: _Acc) -> None:
    idx = int(col[3:])
    absent = [d for d in devices if pos[d] >= len(cells)]
    if absent:
        acc.missing.append(f"{col}: {len(absent)} cell(s) missing (truncated row?)")
    nvlinks: list[NvLink] = []
    for other in devices:
        j = pos[other]
        if j >= len(cells) or other == col:
            continue
        cell = cells[j]
        if not _CELL.fullmatch(cell):
            acc.notes.append(f"{col}/{other}: unexpected cell {cell!r}")
            continue
        path = PathType.parse(cell)
        if _GPU.fullmatch(other) and path is PathType.NV:
            nvlinks.append(NvLink(peer=int(other[3:]), links=int(cell[2:])))
        elif other in nic_names:
            acc.gpu_nic[(idx, nic_names[other])] = path
    cpus, numa = _affinity(col, {h: cells[pos[h]] for h in tail_cols if pos[h] < len(cells)}, acc)
    if numa is not None and cpus:
        acc.numa_cpus.setdefault(numa, set()).update(cpus)
    acc.gpus.append(Gpu(index=idx, numa=numa, cpus=cpus, nvlinks=tuple(nvlinks)))


def _nic_names(nic_cols: list[str], lines: list[str], acc: _Acc) -> dict[str, str]:
    legend = {m.group(1): m.group(2) for ln in lines if (m := _LEGEND_NIC.match(ln))}
    out: dict[str, str] = {}
    unnamed = []
    for c in nic_cols:
        if _NICN.fullmatch(c) and c not in legend:
            unnamed.append(c)
        out[c] = legend.get(c, c)
    if unnamed:
        acc.missing.append(f"{', '.join(unnamed)}: no NIC Legend in this capture: device names "
                           "unknown (kept as column labels; no NCCL/UCX device variable uses them)")
    return out


def parse_topo_matrix(text: str, where: str | None = None) -> NodeTopology:
    """Parse one ``nvidia-smi topo -m`` capture. Raises ParseError when no matrix header is found."""
    lines = clean_paste(text)
    hdr_i = _find_header(lines, where)
    header = _header_tokens(lines[hdr_i])
    dev_cols = [h for h in header if h not in _TRAILING]
    acc = _Acc()
    rows = _rows(lines[hdr_i + 1:], dev_cols)
    if not any(h in ("CPU_AFFINITY", "NUMA_AFFINITY") for h in header) and any(
            c in _P2P for cells in rows.values() for c in cells):
        raise ParseError("this is an nvidia-smi topo -p2p status matrix, not topo -m "
                         "(no path types or CPU affinity in it)", where)
    unknown_cols = [h for h in dev_cols if not (_GPU.fullmatch(h) or _NICN.fullmatch(h)
                                                or _NIC_NAME.fullmatch(h) or h in rows)]
    devices = [h for h in dev_cols if h not in unknown_cols]
    if unknown_cols:
        acc.notes.append(f"ignored unknown column(s): {', '.join(unknown_cols)}")
    tail_cols = [h for h in header if h in _TRAILING]
    gpu_cols = [h for h in devices if _GPU.fullmatch(h)]
    nic_cols = [h for h in devices if not _GPU.fullmatch(h)]
    if not gpu_cols:
        acc.missing.append("no GPU columns: node with no GPUs visible to nvidia-smi")
    nic_names = _nic_names(nic_cols, lines[hdr_i + 1:], acc)
    pos: dict[str, int] = {}
    for i, h in enumerate(header):
        pos.setdefault(h, i)  # cells are positional: unknown columns keep their place
    absent_rows = []
    for col in gpu_cols:
        if col not in rows:
            absent_rows.append(int(col[3:]))
            acc.gpus.append(Gpu(index=int(col[3:])))
        else:
            _gpu_row(col, rows[col], devices, pos, nic_names, tail_cols, acc)
    if absent_rows:
        acc.missing.insert(0, f"{_ranges(absent_rows)} row{'s' if len(absent_rows) > 1 else ''} "
                              "missing (truncated paste?): their paths and CPUs are unknown")
    missing_nic_rows = [c for c in nic_cols if c not in rows]
    if missing_nic_rows:
        acc.missing.append(f"{', '.join(missing_nic_rows)} row(s) missing (truncated paste?)")
    nics = tuple(Nic(name=nic_names[c]) for c in nic_cols)
    acc.missing.append("PCI bus ids, NIC kind/rate/state and NVMe drives are not in nvidia-smi topo -m")
    return NodeTopology(
        source="nvidia-smi-topo", where=where, gpus=tuple(sorted(acc.gpus, key=lambda g: g.index)),
        nics=nics, gpu_nic=acc.gpu_nic,
        numa_cpus={k: tuple(sorted(v)) for k, v in sorted(acc.numa_cpus.items())},
        missing=tuple(acc.missing), notes=tuple(acc.notes))

"""The run's environment from the lines its training log already holds (pure, bounded).

NCCL (``NCCL_DEBUG=INFO``; ``src/debug.cc`` prefixes every line with ``%h:%p:%t [%d]``, host,
pid, thread and CUDA device, and a WARN line with the source file and line as well)::

    vm:730:730 [0] NCCL INFO cudaDriverVersion 13000              -> cuda_driver 13.0
    vm:730:730 [0] NCCL INFO NCCL version 2.28.9+cuda13.0         -> nccl 2.28.9, nccl_cuda 13.0
    NCCL version 2.19.3+cuda12.3                                  (2.4-2.2x: printed bare)
    vm:730:730 [0] NCCL INFO Using network Socket                 -> nccl_net Socket
    x:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v6 (v6)  -> nccl_net_plugin
    x:1:1 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), ...     -> ... internal
    x:1:1 [0] NCCL INFO NET/OFI Using aws-ofi-nccl 1.3.0aws       -> aws_ofi_nccl 1.3.0aws
    x:1:1 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0  -> env.NCCL_IB_HCA mlx5_0
    x:1:1 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : ...     (the host only)

and the host of every such line is one of the run's nodes. A communicator's init line places a
rank: ``host:1:2 [3] NCCL INFO comm 0x7f.. rank 11 nranks 16 cudaDev 3 [nvmlDev 3] [busId
4e000] - Init COMPLETE`` (``ncclCommInitRank[Config] comm ...`` from 2.2x) puts rank 11 on
``host``, GPU 3; only the largest communicator is kept (the world: TP/PP/DP groups number
their ranks from 0 again), at most ``MAX_PLACES`` ranks. DeepSpeed: ``DeepSpeed info:
version=0.14.0, git-hash=…`` (``runtime/engine.py``) and the ``ds_report`` environment block
Megatron-DeepSpeed prints (``torch version ....... 2.3.0+cu121``, ``deepspeed info ....
0.15.5+unknown, …``, ``torch cuda version ... 12.1``) give ``deepspeed``, ``torch``,
``torch_cuda``. The parallel layout Megatron-LM and torchtitan print at start gives
``parallel.tp`` / ``.pp`` / ``.dp`` / ``.cp`` / ``.ep`` / ``.world`` / ``.order``
(``formats.layout_lines``; ``layout.stated`` makes it the job's layout).

Memory is bounded whatever the log: at most ``MAX_VALUES`` values per attribute (a log whose
lines disagree, a mixed image, keeps both), ``MAX_ENV`` ``NCCL_*`` settings, ``MAX_HOSTS``
hosts, values of at most ``MAX_TEXT`` characters; what did not fit, and lines that started a
fact but could not be read, are counted (first file:line, reason, count), never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from minutiae.analyses.stragglers.formats import layout_lines
from minutiae.analyses.stragglers.formats.base import LineReader
from minutiae.analyses.stragglers.formats.types import Skipped

MAX_VALUES = 8
MAX_ENV = 32
MAX_HOSTS = 16384
MAX_TEXT = 128
MAX_PLACES = 1 << 17
#: RFC 1035: a host name is at most 253 characters
MAX_HOST = 253
#: ``NCCL_*`` settings that name a per-run output file: every run would differ in them
PER_RUN = frozenset({"NCCL_DEBUG_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_DUMP_FILE"})

_TAG = re.compile(r"\bNCCL (?:INFO|WARN) ")
_HOST = re.compile(r"(?<![\w.:-])([A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\](?: \S+:\d+)? $")
_MSG = re.compile(r"(NCCL version |cudaDriverVersion |Using network |NET/Plugin ?: ?|"
                  r"NET/OFI Using aws-ofi-nccl |(NCCL_[A-Z0-9_]{1,48}) set (?:by environment )?to )")
_COMM = re.compile(r"\bcomm 0x[0-9a-fA-F]{1,16} rank (\d{1,7}) nranks (\d{1,7}) cudaDev (\d{1,4})\b")
_BARE = re.compile(r"(?:^|[\s)\]|>])NCCL version (\S+)$")
_VERSION = re.compile(r"(\d{1,3}\.\d{1,3}\.\d{1,4}[A-Za-z0-9]{0,12})(?:\+(cuda|hip)(\d{1,3}\.\d{1,3}))?")
_PLUGIN = re.compile(r"Loaded (net|collnet) plugin (.+?) \(v\d+\)$")
_NO_PLUGIN = ("No plugin found", "Could not find: libnccl-net")
_DS = re.compile(r"DeepSpeed info: version=([^,\s]+)")
_REPORT = re.compile(r"(?:^|\s)(torch version|deepspeed info|torch cuda version) \.{3,} ([^,\s]+)")
_REPORT_KEY = {"torch version": "torch", "deepspeed info": "deepspeed",
               "torch cuda version": "torch_cuda"}


class Facts:
    """Attributes (name -> values, first seen first) and hosts of one file, capped."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, None]] = {}
        self.hosts: dict[str, None] = {}
        self.problems: dict[str, list[int]] = {}   # reason -> [first line, count]
        self.world = 0                              # ranks of the largest communicator seen
        self.places: dict[int, tuple[str, int]] = {}  # its rank -> (host, CUDA device)
        self.moved = False                          # a rank placed on two hosts/GPUs

    def problem(self, no: int, reason: str) -> None:
        seen = self.problems.setdefault(reason, [no, 0])
        seen[1] += 1

    def add(self, no: int, key: str, value: str) -> None:
        vals = self._slot(no, key)
        if vals is None:
            return
        value = value.strip()
        if not value or len(value) > MAX_TEXT or not value.isprintable():
            self.problem(no, f"{key}: value empty, unprintable or longer than {MAX_TEXT} "
                             "characters, not kept")
            return
        if value not in vals:
            if len(vals) >= MAX_VALUES:
                self.problem(no, f"more than {MAX_VALUES} values of {key}: the first kept")
                return
            vals[value] = None

    def _slot(self, no: int, key: str) -> dict[str, None] | None:
        """The values of ``key``, admitted first (so the problems named after a key are as
        bounded as the keys); None past ``MAX_ENV`` settings."""
        vals = self.values.get(key)
        if vals is None:
            if key.startswith("env.") and sum(k.startswith("env.") for k in self.values) >= MAX_ENV:
                self.problem(no, f"more than {MAX_ENV} NCCL_* settings: the first {MAX_ENV} kept")
                return None
            vals = self.values[key] = {}
        return vals

    def host(self, no: int, name: str) -> None:
        if name in self.hosts:
            return
        if len(name) > MAX_HOST:
            self.problem(no, f"host name longer than {MAX_HOST} characters in an NCCL line "
                             "prefix: not a host, not kept")
        elif len(self.hosts) >= MAX_HOSTS:
            self.problem(no, f"more than {MAX_HOSTS} hosts in NCCL line prefixes: the first "
                             f"{MAX_HOSTS} kept")
        else:
            self.hosts[name] = None

    def place(self, no: int, rank: int, nranks: int, host: str, dev: int) -> None:
        """Rank ``rank`` of a communicator of ``nranks`` runs on ``host``, GPU ``dev``."""
        if not 0 <= rank < nranks or nranks < self.world:
            return
        if nranks > MAX_PLACES:
            self.problem(no, f"a communicator of more than {MAX_PLACES} ranks: ranks not placed")
            return
        if nranks > self.world:
            self.world, self.places = nranks, {}
        had = self.places.setdefault(rank, (host, dev))
        if had != (host, dev):  # a restart onto other nodes: no rank is named rather than wrongly
            self.problem(no, "a rank placed on two hosts or GPUs by NCCL init lines (a restart?): "
                             "ranks not named by node")
            self.moved = True

    def placement(self) -> tuple[int, tuple[tuple[int, str, int], ...]]:
        """(world size, (rank, host, GPU)...), empty once a rank was placed twice differently."""
        if self.moved:
            return 0, ()
        return self.world, tuple((r, h, d) for r, (h, d) in sorted(self.places.items()))

    def attrs(self) -> dict[str, frozenset[str]]:
        return {k: frozenset(v) for k, v in self.values.items() if v}

    def skipped(self, where: str) -> list[Skipped]:
        return [Skipped(f"{where}:{no}", reason, count)
                for reason, (no, count) in self.problems.items()]


class Reader(LineReader):
    """Environment lines: facts only (no step rows, never a format of its own: ``seen`` stays
    0, so what a log is recognised as does not change)."""

    name = "environment"
    advice = "it prints the run's environment (NCCL, DeepSpeed versions), not its step times"
    signs = ("NCCL ", "DeepSpeed info", "torch version", "deepspeed info", "torch cuda version",
             *layout_lines.SIGNS)

    def __init__(self) -> None:
        super().__init__()
        self.facts = Facts()
        self._internal: int | None = None   # line of the first "no net plugin" line

    def feed(self, no: int, rank: int | None, line: str) -> bool:
        tag = _TAG.search(line)
        if tag is not None:
            self._host(no, line[:tag.start()])
            msg = line[tag.end():].rstrip()
            if "nranks" in msg:
                self._comm(no, line[:tag.start()], msg)
            self._nccl(no, msg)
            return True
        return self._other(no, line.rstrip())

    def finish(self) -> None:
        if self._internal is not None and "nccl_net_plugin" not in self.facts.values:
            self.facts.add(self._internal, "nccl_net_plugin", "internal")

    def _host(self, no: int, head: str) -> None:
        if head[:head.find(":")] in self.facts.hosts:  # the usual line: a host already seen
            return
        m = _HOST.search(head)
        if m is not None:
            self.facts.host(no, m[1])

    def _comm(self, no: int, head: str, msg: str) -> None:
        m = _COMM.search(msg)
        h = _HOST.search(head) if m is not None else None
        if m is not None and h is not None and len(h[1]) <= MAX_HOST:
            self.facts.place(no, int(m[1]), int(m[2]), h[1], int(m[3]))

    def _nccl(self, no: int, msg: str) -> None:
        m = _MSG.match(msg)
        if m is None:
            return
        rest = msg[m.end():]
        word = m[1]
        if word.startswith("NCCL version"):
            self._version(no, rest)
        elif word.startswith("cudaDriverVersion"):
            self._driver(no, rest)
        elif word.startswith("Using network"):
            self.facts.add(no, "nccl_net", rest)
        elif word.startswith("NET/Plugin"):
            self._plugin(no, rest)
        elif word.startswith("NET/OFI"):
            self.facts.add(no, "aws_ofi_nccl", rest.split(" ", 1)[0])
        elif m[2] not in PER_RUN:
            value = rest[:-1] if rest.endswith(".") and len(rest) > 1 else rest
            self.facts.add(no, f"env.{m[2]}", value)

    def _version(self, no: int, text: str) -> None:
        token = text.strip().split(" ", 1)[0]
        m = _VERSION.fullmatch(token)
        if m is None:
            self.facts.problem(no, "NCCL version line without a readable version "
                                   "(major.minor.patch[+cudaX.Y]): not kept")
            return
        self.facts.add(no, "nccl", m[1])
        if m[2] is not None:
            self.facts.add(no, f"nccl_{m[2]}", m[3])

    def _driver(self, no: int, text: str) -> None:
        code = text.strip()
        if not (code.isdecimal() and 4 <= len(code) <= 6):
            self.facts.problem(no, "cudaDriverVersion line without a readable version: not kept")
            return
        v = int(code)
        self.facts.add(no, "cuda_driver", f"{v // 1000}.{v % 1000 // 10}")

    def _plugin(self, no: int, text: str) -> None:
        m = _PLUGIN.search(text)
        if m is not None:
            self.facts.add(no, f"nccl_{m[1]}_plugin", m[2])
        elif any(s in text for s in _NO_PLUGIN) and self._internal is None:
            self._internal = no

    def _other(self, no: int, line: str) -> bool:
        m = _BARE.search(line)
        if m is not None:
            self._version(no, m[1])
            return True
        m = _DS.search(line)
        if m is not None:
            self.facts.add(no, "deepspeed", m[1])
            return True
        m = _REPORT.search(line)
        if m is not None and m[2] != "None":
            self.facts.add(no, _REPORT_KEY[m[1]], m[2])
            return True
        sizes = layout_lines.read(line)
        for key, value in (sizes or {}).items():
            self.facts.add(no, f"parallel.{key}", value)
        return sizes is not None


def merge_attrs(parts: Iterable[Mapping[str, frozenset[str]]]) -> dict[str, frozenset[str]]:
    """Several files' attributes as one run's: every value kept (up to ``MAX_VALUES`` each)."""
    out: dict[str, set[str]] = {}
    for attrs in parts:
        for key, vals in attrs.items():
            have = out.setdefault(key, set())
            for v in sorted(vals):
                if len(have) < MAX_VALUES:
                    have.add(v)
    return {k: frozenset(v) for k, v in out.items()}


def merge_places(parts: Iterable[tuple[int, tuple[tuple[int, str, int], ...]]],
                 ) -> tuple[int, tuple[tuple[int, str, int], ...]]:
    """Several files' placements (world size, (rank, host, GPU)...) as one file's would be
    (``Facts.place``): the largest world's; none when two files place a rank differently (a
    restart onto other nodes)."""
    facts = Facts()
    for world, places in parts:
        for rank, host, dev in places:
            facts.place(0, rank, world, host, dev)
    return facts.placement()


def merge_hosts(parts: Iterable[tuple[str, ...]]) -> tuple[tuple[str, ...], int]:
    """Several files' hosts, first seen first, at most ``MAX_HOSTS``; and how many were left out."""
    out: dict[str, None] = {}
    left = 0
    for hosts in parts:
        for h in hosts:
            if h in out:
                continue
            if len(out) >= MAX_HOSTS:
                left += 1
            else:
                out[h] = None
    return tuple(out), left

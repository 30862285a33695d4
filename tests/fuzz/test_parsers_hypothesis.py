"""Hypothesis against every parser (issue 16 item 6): real-format seeds (embedded lines in the
formats' own shapes, plus the first 8 KiB of the real captures under ../shared/realdata when
present) spliced with hostile fragments (NUL, CR, BOM, negative masks, 20-digit numbers, NaN,
long tokens, truncation). Each parser returns or raises a ``MinutiaeError``: never another
exception, never a hang (SIGALRM, 10 s per example)."""

from __future__ import annotations

import signal
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minutiae.analyses.stragglers.formats.parse import parse_log
from minutiae.analyses.stragglers.parse import parse_timings
from minutiae.analyses.topology.parse.detect import parse_topology
from minutiae.controller.policy import parse_policy
from minutiae.errors import MinutiaeError
from minutiae.history.parse import parse_runs_csv
from minutiae.node.sources.dcgm.parse import parse_dcgm
from minutiae.node.sources.ib.parse_ibstat import parse_ibstat
from minutiae.node.sources.ib.parse_sysfs import parse_rate, parse_state
from minutiae.node.sources.ibv_devinfo.parse import parse_ibv_devinfo
from minutiae.node.sources.kernel_log.parse import parse_bytes
from minutiae.node.sources.nvidia_smi.parse.text import parse_nvidia_smi_text
from minutiae.node.sources.nvidia_smi.parse.xml import parse_nvidia_smi_xml
from minutiae.node.sources.perfquery.parse import parse_perfquery

REAL = Path(__file__).resolve().parents[3] / "shared" / "realdata"
HOSTILE = ["\0", "\r", "\ufeff", "-1", "-5", "4294967296", "12345678901234567890", "nan",
           "inf", "1e999", "x" * 5000, "\n", "\r\n", "0x", "ffffffff,ffffffff", ":", "|",
           "<", ">", '"', "[[[[", "=", "-"]

SEEDS: dict[str, list[str]] = {
    "kernel": ["[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off "
               "the bus.\n", "Nov 13 16:27:01 gpu001 kernel: mlx5_core 0000:5e:00.0: "
               "mlx5_cmd_out_err:838: ACCESS_REG(0x805) op_mod(0x1) failed, status bad "
               "operation(0x2)\n", "[Tue Nov 13 16:27:01 2025] pcieport 0000:00:01.0: AER: "
               "Corrected error received: 0000:01:00.0\n"],
    "smi_xml": ['<?xml version="1.0" ?><nvidia_smi_log><driver_version>570.158.01'
                '</driver_version><attached_gpus>1</attached_gpus><gpu id="00000000:3B:00.0">'
                '<product_name>NVIDIA H100</product_name><ecc_errors><volatile>'
                '<dram_uncorrectable>0</dram_uncorrectable></volatile></ecc_errors>'
                '<retired_pages><pending_retirement>No</pending_retirement></retired_pages>'
                '</gpu></nvidia_smi_log>'],
    "smi_text": ["==============NVSMI LOG==============\n\nDriver Version : 570.158.01\n"
                 "Attached GPUs : 1\nGPU 00000000:3B:00.0\n    Product Name : NVIDIA H100\n"
                 "    ECC Errors\n        Volatile\n            DRAM Uncorrectable : 0\n"],
    "dcgm": ['# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n'
             '# TYPE DCGM_FI_DEV_XID_ERRORS gauge\nDCGM_FI_DEV_XID_ERRORS{gpu="0",'
             'UUID="GPU-1",device="nvidia0",modelName="NVIDIA H100",Hostname="n1"} 0\n'
             'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",GPU_I_ID="1"} 45\n'],
    "ibstat": ["CA 'mlx5_0'\n\tCA type: MT4123\n\tNumber of ports: 1\n\tPort 1:\n"
               "\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 200\n"
               "\t\tLink layer: InfiniBand\n"],
    "perfquery": ["# Port extended counters: Lid 1 port 1 (CapMask: 0x5A00)\n"
                  "PortSelect:......................1\nSymbolErrorCounter:..............0\n"
                  "LinkDownedCounter:...............2\nPortRcvErrors:...................0\n"],
    "ibv_devinfo": ["hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tport:\t1\n"
                    "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tactive_mtu:\t\t4096 (5)\n"],
    "topo": ["\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV18\tPIX\t0-51"
             "\t0\nGPU1\tNV18\t X \tSYS\t52-103\t1\nNIC0\tPIX\tSYS\t X \n\nLegend:\n",
             '<system version="1"><cpu numaid="0" affinity="ffffffff,ffffffff" '
             'arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143"><pci '
             'busid="0000:3b:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" '
             'link_width="16"><gpu dev="0" sm="90" rank="0" gdr="1"/></pci></cpu></system>',
             '<?xml version="1.0" encoding="UTF-8"?><topology version="2.0"><object '
             'type="Machine" os_index="0" cpuset="0x000000ff"><object type="NUMANode" '
             'os_index="0" cpuset="0x0000000f"/></object></topology>'],
    "timings": ["step,rank,seconds,node\n0,0,1.0,n1\n0,1,1.1,n1\n1,0,1.0,n1\n1,1,1.2,n1\n"],
    "trainlog": [" [2025-11-13 16:27:01] iteration      100/  500000 | consumed samples: "
                 "12800 | elapsed time per iteration (ms): 1234.5 | learning rate: 1.0E-04 |\n"
                 "{'loss': 2.1, 'grad_norm': 1.0, 'learning_rate': 5e-05, 'epoch': 0.1}\n"],
    "runs": ["run_id,time,signature,seconds_per_step,nodes,driver\n"
             "r1,2025-11-01T00:00:00Z,llama,1.25,n1;n2,570.158.01\n"
             "r2,2025-11-02T00:00:00Z,llama,1.31,n1;n3,575.51.03\n"],
    # the shipped policy (every table and rule form), and a small overlay
    "policy": [resources.files("minutiae.controller").joinpath("default_policy.toml")
               .read_text("utf-8"), "dry_run = true\n[budget]\nmax_unavailable_fraction = 0.1\n"],
}
REAL_DIRS = {"kernel": "kernel_logs", "smi_xml": "nvidia_smi", "dcgm": "dcgm",
             "ibstat": "infiniband", "topo": "nccl_topo"}


def _policy(text: str) -> Any:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    return parse_policy(data)


PARSERS: dict[str, Callable[[str], Any]] = {
    "kernel": lambda t: parse_bytes(t.encode(errors="surrogatepass"), year=2025),
    "smi_xml": lambda t: parse_nvidia_smi_xml(t.encode(errors="surrogatepass")),
    "smi_text": parse_nvidia_smi_text,
    "dcgm": parse_dcgm,
    "ibstat": parse_ibstat,
    "perfquery": parse_perfquery,
    "ibv_devinfo": parse_ibv_devinfo,
    "topo": lambda t: parse_topology(t.encode(errors="surrogatepass"), "fuzz"),
    "timings": lambda t: parse_timings(t.encode(errors="surrogatepass"), "fuzz"),
    "trainlog": lambda t: parse_log(t.encode(errors="surrogatepass"), "fuzz"),
    "runs": lambda t: parse_runs_csv(t, "fuzz"),
    "policy": _policy,
    "sysfs_ib": lambda t: (parse_state(t), parse_rate(t)),
}
SEEDS["sysfs_ib"] = ["4: ACTIVE\n", "200 Gb/sec (4X HDR)\n"]


def _real_seeds(kind: str) -> list[str]:
    sub = REAL_DIRS.get(kind)
    if sub is None or not (REAL / sub).is_dir():
        return []
    out = []
    for p in sorted((REAL / sub).rglob("*"))[:40]:
        if p.is_file() and p.suffix not in (".md", ".gz", ".json"):
            out.append(p.read_bytes()[:8192].decode("utf-8", errors="replace"))
    return out[:8]


def mutated(seeds: list[str]) -> st.SearchStrategy[str]:
    """A seed cut at a random point with hostile fragments inserted or replacing a token."""
    frag = st.sampled_from(HOSTILE) | st.text(max_size=20)

    @st.composite
    def build(draw: st.DrawFn) -> str:
        text = draw(st.sampled_from(seeds))
        for _ in range(draw(st.integers(0, 4))):
            i = draw(st.integers(0, len(text)))
            j = draw(st.integers(i, min(len(text), i + draw(st.integers(0, 12)))))
            text = text[:i] + draw(frag) + text[j:]
        if draw(st.booleans()):
            text = text[:draw(st.integers(0, len(text)))]
        return text

    return build()


class Hang(Exception):
    pass


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def fire(signum: int, frame: FrameType | None) -> None:
        raise Hang

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


COUNTS = {"cases": 0}


@pytest.mark.parametrize("kind", sorted(PARSERS))
def test_parser_returns_or_raises_a_minutiae_error(kind: str) -> None:
    seeds = SEEDS[kind] + _real_seeds(kind)
    parse = PARSERS[kind]

    @settings(max_examples=120, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(mutated(seeds))
    def one(text: str) -> None:
        COUNTS["cases"] += 1
        with deadline(10), suppress(MinutiaeError):
            parse(text)

    one()

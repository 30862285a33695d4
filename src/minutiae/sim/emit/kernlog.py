"""Kernel-log emitter: message shapes copied from real captures (../shared/realdata/kernel_logs,
nvidia_smi) and from the Linux kernel's own format strings, rendered in the formats real nodes
produce (``dmesg -T``, ``dmesg --time-format iso --decode``, ISO, ``journalctl -o short-iso``,
syslog with host and uptime). Pure: returns lines; the writer puts them on disk."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

import numpy as np

from minutiae.scoring.truth import TruthEvent
from minutiae.sim.world.fleet import gpu_bus, hca_bus


class LogFormat(Enum):
    DMESG_T = "dmesg -T"
    ISO_DECODE = "dmesg --time-format iso --decode"
    ISO = "dmesg --time-format iso"
    JOURNAL = "journalctl -k -o short-iso"
    SYSLOG = "syslog"


FORMATS = tuple(LogFormat)
_WD = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MON = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True, slots=True)
class Line:
    time: float
    facility: str   # kern | daemon
    prio: str       # emerg alert crit err warn notice info debug
    msg: str


def format_for(index: int) -> LogFormat:
    return FORMATS[index % len(FORMATS)]


def render(lines: Iterable[Line], fmt: LogFormat, host: str, boots: list[float]) -> Iterable[str]:
    """Lines in ``fmt``; ``boots`` (sorted) gives the uptime shown by the syslog format."""
    import bisect

    for ln in lines:
        tm = time.gmtime(ln.time)
        frac = int((ln.time % 1.0) * 1e6)
        if fmt is LogFormat.DMESG_T:
            yield (f"[{_WD[tm.tm_wday]} {_MON[tm.tm_mon - 1]} {tm.tm_mday:2d} "
                   f"{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d} {tm.tm_year}] {ln.msg}")
        elif fmt in (LogFormat.ISO_DECODE, LogFormat.ISO):
            iso = (f"{tm.tm_year}-{tm.tm_mon:02d}-{tm.tm_mday:02d}T{tm.tm_hour:02d}:{tm.tm_min:02d}:"
                   f"{tm.tm_sec:02d},{frac:06d}+00:00")
            if fmt is LogFormat.ISO:
                yield f"{iso} {ln.msg}"
            else:
                yield f"{ln.facility:<6}:{ln.prio:<6}: {iso} {ln.msg}"
        elif fmt is LogFormat.JOURNAL:
            yield (f"{tm.tm_year}-{tm.tm_mon:02d}-{tm.tm_mday:02d}T{tm.tm_hour:02d}:{tm.tm_min:02d}:"
                   f"{tm.tm_sec:02d}+0000 {host} kernel: {ln.msg}")
        else:
            k = bisect.bisect_right(boots, ln.time) - 1
            up = ln.time - boots[k] if k >= 0 else ln.time - boots[0]
            yield (f"{_MON[tm.tm_mon - 1]} {tm.tm_mday:2d} {tm.tm_hour:02d}:{tm.tm_min:02d}:"
                   f"{tm.tm_sec:02d} {host} kernel: [{up:12.6f}] {ln.msg}")


def _uuid(rng: np.random.Generator) -> str:
    h = "".join(f"{int(x):02x}" for x in rng.integers(0, 256, 16))
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _pid(rng: np.random.Generator) -> int:
    return int(rng.integers(1000, 4_000_000))


def boot_lines(t: float, software: dict[str, str], gpus: int, rng: np.random.Generator,
               degraded_gpu: int | None = None) -> list[Line]:
    """A boot's kernel messages (shapes from realdata pkg_dmesg__dmesg.decode.iso.log.1), with
    the benign warnings real boots print (insufficient slot power, EDAC driver registration)."""
    k = software.get("kernel", "5.15.0-105-generic")
    out = [
        Line(t, "kern", "notice", f"Linux version {k} (buildd@lcy02-amd64-080) (x86_64-linux-gnu-gcc-11 "
             "(Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) "
             "#115-Ubuntu SMP Mon Apr 15 09:52:04 UTC 2024"),
        Line(t + 0.001, "kern", "info", f"Command line: BOOT_IMAGE=/boot/vmlinuz-{k} root=UUID="
             "3f1c2a8e-6d0b-4b7e-9a52-0c8d1f2e7b64 ro pci=realloc=off iommu=pt"),
        Line(t + 4.2, "kern", "info", "EDAC MC1: Giving out device to module i10nm_edac controller "
             "Intel_10nm Socket#0 IMC#1: DEV 0000:7e:0d.0 (INTERRUPT)"),
    ]
    for i in range(gpus):
        hb = hca_bus(i)
        out.append(Line(t + 10.0 + 0.3 * i, "kern", "info",
                        f"mlx5_core 0000:{hb}:00.0: 504.112 Gb/s available PCIe bandwidth (32.0 GT/s PCIe x16 link)"))
    # every ConnectX function prints it at driver load on such slots (the real capture: all 12)
    for i in range(gpus):
        out.append(Line(t + 13.1 + 0.4 * i, "kern", "warn", f"mlx5_core 0000:{hca_bus(i)}:00.0: "
                        "mlx5_pcie_event:299:(pid 1304): Detected insufficient power on the PCIe slot (27W)."))
    for i in range(gpus):
        hb = hca_bus(i)
        out.append(Line(t + 15.0 + 0.1 * i, "kern", "info",
                        f"mlx5_core 0000:{hb}:00.0 ibp{int(hb, 16)}s0: renamed from ib{i}"))
    out.append(Line(t + 40.0, "kern", "warn", f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  "
                    f"{software.get('driver', '535.161.08')}  Thu Feb 22 21:03:02 UTC 2024"))
    out.append(Line(t + 40.5, "kern", "info", "nvidia-nvlink: Nvlink Core is being initialized, major device number 507"))
    if degraded_gpu is not None:
        b = gpu_bus(degraded_gpu)
        up = f"{int(b, 16) - 1:02x}"
        out.append(Line(t + 9.0, "kern", "info",
                        f"pci 0000:{b}:00.0: 252.056 Gb/s available PCIe bandwidth, limited by 32.0 GT/s "
                        f"PCIe x8 link at 0000:{up}:00.0 (capable of 504.112 Gb/s with 32.0 GT/s PCIe x16 link)"))
    return out


_NOISE = (
    ("info", "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready"),
    ("info", "nvidia-nvswitch2: open (major=510)"),
    ("info", "nvidia-nvswitch3: open (major=510)"),
    ("info", "IPv6: ADDRCONF(NETDEV_CHANGE): cali1d5c6a0536f: link becomes ready"),
    ("warn", "perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate to 79750"),
    ("info", "Initializing XFRM netlink socket"),
)
PEERMEM = "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing"


def noise_lines(start: float, end: float, per_day: float, rng: np.random.Generator) -> list[Line]:
    n = int(rng.poisson(per_day * (end - start) / 86400.0))
    times = np.sort(rng.uniform(start, end, n))
    picks = rng.integers(len(_NOISE), size=n)
    return [Line(float(t), "kern", _NOISE[int(p)][0], _NOISE[int(p)][1]) for t, p in zip(times, picks, strict=True)]


def job_end_lines(t: float, rng: np.random.Generator) -> list[Line]:
    """GPUDirect RDMA teardown at a job's end (real, benign, says ERROR: must not alarm)."""
    return [Line(t + 0.0113 * i, "kern", "err", PEERMEM) for i in range(int(rng.integers(2, 6)))]


@dataclass(frozen=True, slots=True)
class _Fault:
    """What every class's lines are made of: the truth event, its GPU, bus and PCI name, a pid."""

    ev: TruthEvent
    g: int
    b: str
    pci: str
    t: float
    pid: int
    rng: np.random.Generator


_EMITTERS: dict[str, Callable[[_Fault], list[Line]]] = {}


def _emits(cls: str) -> Callable[[Callable[[_Fault], list[Line]]], Callable[[_Fault], list[Line]]]:
    """Register the decorated function as the kernel messages of fault class ``cls``."""
    def add(fn: Callable[[_Fault], list[Line]]) -> Callable[[_Fault], list[Line]]:
        _EMITTERS[cls] = fn
        return fn
    return add


def fault_lines(ev: TruthEvent, rng: np.random.Generator) -> list[Line]:
    """The kernel messages of one truth event (empty when it has no kernel-log signature)."""
    g = int(ev.details.get("gpu", 0))
    b = gpu_bus(g)
    f = _Fault(ev, g, b, f"PCI:0000:{b}:00", ev.start, _pid(rng), rng)   # the pid is drawn for every event
    emit = _EMITTERS.get(ev.cls)
    return emit(f) if emit is not None else []


@_emits("gpu_off_bus")
def _gpu_off_bus(f: _Fault) -> list[Line]:
    b, pci, t, rng = f.b, f.pci, f.t, f.rng
    return [
        Line(t, "kern", "err", f"NVRM: GPU at {pci}: {_uuid(rng)}"),
        Line(t, "kern", "err", f"NVRM: GPU Board Serial Number: 1653{int(rng.integers(10**8, 10**9))}"),
        Line(t, "kern", "err", f"NVRM: Xid ({pci}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
        Line(t + 0.00001, "kern", "err", f"NVRM: GPU 0000:{b}:00.0: GPU has fallen off the bus."),
    ]


@_emits("gpu_nvlink")
def _gpu_nvlink(f: _Fault) -> list[Line]:
    pci, t, rng = f.pci, f.t, f.rng
    link = int(rng.integers(0, 18))
    return [Line(t, "kern", "warn", f"NVRM: Xid ({pci}): 74, pid='<unknown>', name=<unknown>, NVLink: fatal "
                 f"error detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")]


@_emits("gpu_uncontained")
def _gpu_uncontained(f: _Fault) -> list[Line]:
    pci, t = f.pci, f.t
    return [Line(t, "kern", "warn", f"NVRM: Xid ({pci}): 95, pid='<unknown>', name=<unknown>, "
                 "Uncontained: FBHUB. RST: Yes, D-RST: No")]


@_emits("gpu_dbe")
def _gpu_dbe(f: _Fault) -> list[Line]:
    pci, t, pid, rng = f.pci, f.t, f.pid, f.rng
    addr = int(rng.integers(0x100000000, 0x13FFFFFFFF))
    out = [
        Line(t, "kern", "warn", f"NVRM: Xid ({pci}): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
             f"error (DBE) has been detected on GPU in the framebuffer at physAddr 0x{addr:x} partition 2, subpartition 1."),
        Line(t + 0.028, "kern", "warn", f"NVRM: Xid ({pci}): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row "
             f"(0x{addr:016x}) marked for remapping, reset gpu to activate."),
        Line(t + 0.036, "kern", "warn", f"NVRM: Xid ({pci}): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No"),
    ]
    for ch in range(8, 8 + int(rng.integers(2, 8))):
        out.append(Line(t + 0.05 + 0.009 * ch, "kern", "warn",
                        f"NVRM: Xid ({pci}): 94, pid={pid}, name=python3.10, Ch {ch:08x}"))
    return out


@_emits("row_remap_failure")
def _row_remap_failure(f: _Fault) -> list[Line]:
    pci, t, rng = f.pci, f.t, f.rng
    addr = int(rng.integers(0x100000000, 0x13FFFFFFFF))
    return [Line(t, "kern", "warn", f"NVRM: Xid ({pci}): 64, pid='<unknown>', name=<unknown>, Row Remapper: "
                 f"Failed to remap row (0x{addr:016x}), too many rows remapped in bank.")]


@_emits("gsp_timeout")
def _gsp_timeout(f: _Fault) -> list[Line]:
    g, pci, t, pid, rng = f.g, f.pci, f.t, f.pid, f.rng
    n = g
    return [
        Line(t, "kern", "warn", f"NVRM: GPU at {pci}: {_uuid(rng)}"),
        Line(t, "kern", "warn", f"NVRM: GPU Board Serial Number: 1650{int(rng.integers(10**8, 10**9))}"),
        Line(t, "kern", "warn", f"NVRM: Xid ({pci}): 119, pid={pid}, name=nvidia-smi, Timeout after 6s of waiting for "
             f"RPC response from GPU{n} GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4)."),
        Line(t, "kern", "warn", f"NVRM: GPU{n} GSP RPC buffer contains function 103 (GSP_RM_ALLOC) and data "
             "0x0000000000002081 0x0000000000000004."),
    ]


@_emits("mce_corrected")
def _mce_corrected(f: _Fault) -> list[Line]:
    ev, rng = f.ev, f.rng
    out: list[Line] = []
    n = int(rng.integers(1, 6))
    for tt in np.sort(rng.uniform(ev.start, ev.end, n)):
        page = int(rng.integers(0x100000, 0x3FFFFF))
        out.append(Line(float(tt), "kern", "warn", "mce: [Hardware Error]: Machine check events logged"))
        out.append(Line(float(tt) + 0.001, "kern", "warn",
                        f"EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 slot:0 "
                        f"page:0x{page:x} offset:0x0 grain:32 syndrome:0x0 - err_code:0x0000:0x009f socket:0 "
                        f"imc:0 rank:1 bg:0 ba:3 row:0x{page & 0x1FFFF:x} col:0x3e8)"))
    return out


@_emits("edac_ue")
def _edac_ue(f: _Fault) -> list[Line]:
    t, rng = f.t, f.rng
    page = int(rng.integers(0x100000, 0x3FFFFF))
    return [
        Line(t, "kern", "emerg", f"EDAC MC1: 1 UE memory read error on CPU_SrcID#1_MC#1_Chan#0_DIMM#0 (channel:0 slot:0 "
             f"page:0x{page:x} offset:0x0 grain:32 - err_code:0x0000:0x009f socket:1 imc:1 rank:0 bg:1 ba:2 "
             f"row:0x{page & 0x1FFFF:x} col:0x1c0)"),
        Line(t + 0.002, "kern", "err", f"Memory failure: 0x{page:x}: recovery action for dirty LRU page: Recovered"),
    ]


@_emits("oom_kill")
def _oom_kill(f: _Fault) -> list[Line]:
    t, pid = f.t, f.pid
    return [
        Line(t, "kern", "warn", "pt_main_thread invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), "
             "order=0, oom_score_adj=0"),
        Line(t + 0.4, "kern", "err", f"Out of memory: Killed process {pid} (python3) total-vm:263519012kB, "
             "anon-rss:201339988kB, file-rss:131072kB, shmem-rss:0kB, UID:1000 pgtables:401560kB oom_score_adj:0"),
    ]


@_emits("hung_task")
def _hung_task(f: _Fault) -> list[Line]:
    ev, t, pid = f.ev, f.t, f.pid
    secs = 122
    out: list[Line] = []
    tt = t + secs
    while tt < ev.end or not out:
        out += [
            Line(tt, "kern", "err", f"INFO: task pt_main_thread:{pid} blocked for more than {secs} seconds."),
            Line(tt, "kern", "err", "      Not tainted 5.15.0-105-generic #115-Ubuntu"),
            Line(tt, "kern", "err", "\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message."),
        ]
        tt += 123.0
        secs += 123
        if len(out) > 30:
            break
    return out


@_emits("nfs_timeout")
def _nfs_timeout(f: _Fault) -> list[Line]:
    ev, t = f.ev, f.t
    return [Line(t, "kern", "notice", "nfs: server fs01 not responding, still trying"),
            Line(ev.end, "kern", "notice", "nfs: server fs01 OK")]


@_emits("app_xid")
def _app_xid(f: _Fault) -> list[Line]:
    ev, pci, t, pid = f.ev, f.pci, f.t, f.pid
    code = int(ev.details.get("code", 13))
    if code == 13:
        return [
            Line(t, "kern", "warn", f"NVRM: Xid ({pci}): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
                 "Exception on (GPC 8, TPC 5, SM 0): Out Of Range Address"),
            Line(t, "kern", "warn", f"NVRM: Xid ({pci}): 13, pid='<unknown>', name=<unknown>, Graphics SM Global "
                 "Exception on (GPC 8, TPC 5, SM 0): Multiple Warp Errors"),
            Line(t, "kern", "warn", f"NVRM: Xid ({pci}): 13, pid='<unknown>', name=<unknown>, Graphics Exception: "
                 "ESR 0x546f30=0x124000e 0x546f34=0x24 0x546f28=0xf81eb60 0x546f2c=0x1174"),
        ]
    if code == 31:
        return [Line(t, "kern", "warn", f"NVRM: Xid ({pci}): 31, pid={pid}, name=python3, Ch 00000008, intr "
                     "00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1a_2c000000. Fault is "
                     "of type FAULT_PDE ACCESS_TYPE_VIRT_READ")]
    return [Line(t, "kern", "warn", f"NVRM: Xid ({pci}): {code}, pid={pid}, name=python3, Ch 00000008")]

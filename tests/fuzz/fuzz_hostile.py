"""Hostile inputs for the fuzz suite (issue 16 item 6) and a CLI runner that measures them:
exit code, stderr, wall time and the child's own peak RSS (``os.wait4``: per child, so one
hungry command is not hidden behind another). A hang is judged by the child's CPU time (an
``RLIMIT_CPU`` the kernel enforces: a loop that never returns burns it whatever the machine's
load), with a wall-clock backstop for one blocked without burning CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

#: every command must stay under this, whatever the input (issue 16 goal)
MAX_RSS_MB = 300
#: an address-space cap on the child, so a regression fails the test instead of the machine
AS_LIMIT = 4 << 30
#: CPU seconds a command may burn on one input before it counts as hung (a quiet machine runs
#: every case in under 3 s)
HANG_CPU_S = 30
#: wall-clock backstop: a command blocked (not burning CPU) this long counts as hung too
HANG_WALL_S = 600.0


@dataclass(frozen=True)
class Run:
    args: tuple[str, ...]
    rc: int
    stderr: str
    seconds: float
    rss_mb: float
    hung: bool

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.stderr

    def ok(self) -> bool:
        """Exit 0/1/3 (2 is click's usage error: never for a file), at most one error line."""
        lines = [ln for ln in self.stderr.splitlines() if ln.startswith("minutiae: error")]
        return (not self.hung and not self.traceback and self.rc in (0, 1, 3)
                and len(lines) <= 1 and self.rss_mb <= MAX_RSS_MB)


#: a small launcher forks the command, limits its address space and CPU time and reports its
#: own peak RSS and how it ended. Measuring from this (large) pytest process would not do: Linux
#: carries the parent's RSS into a child's ru_maxrss through fork and exec, so every figure
#: would be pytest's.
_LAUNCH = """
import os, resource, subprocess, sys
n, cpu, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def limits():
    resource.setrlimit(resource.RLIMIT_AS, (n, n))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
p = subprocess.Popen(sys.argv[4:], preexec_fn=limits)
_, status, ru = os.wait4(p.pid, 0)
code = os.waitstatus_to_exitcode(status)
with open(out, "w") as fh:
    fh.write(f"{ru.ru_maxrss} {code}")
os._exit(code if code >= 0 else 128 - code)
"""
_CPU_KILLED = (-signal.SIGXCPU, -signal.SIGKILL)


def run_cli(args: list[str], cwd: Path, cpu_s: int = HANG_CPU_S, wall_s: float = HANG_WALL_S,
            python: tuple[str, ...] = ("-m", "minutiae.cli.main")) -> Run:
    """The command (``python -m minutiae.cli.main ARGS``) in a child: hung when it burnt
    ``cpu_s`` CPU seconds or ran ``wall_s``."""
    tag = f"{os.getpid()}-{threading.get_ident()}"
    err, rss_file = cwd / f".stderr-{tag}", cwd / f".rss-{tag}"
    t0 = time.monotonic()
    with open(err, "wb") as fh:
        p = subprocess.Popen([sys.executable, "-c", _LAUNCH, str(AS_LIMIT), str(cpu_s),
                              str(rss_file), sys.executable, *python, *args],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fh,
                             cwd=cwd, start_new_session=True)
        hung = False
        deadline = t0 + wall_s
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                hung = True
                os.killpg(p.pid, signal.SIGKILL)  # the launcher and the command
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: tell Popen
    text = err.read_text(errors="replace")
    err.unlink()
    try:  # the command's own peak, from the launcher; the launcher's when the command was killed
        kib_text, code_text = rss_file.read_text().split()
        kib = int(kib_text)
        hung = hung or int(code_text) in _CPU_KILLED  # its CPU limit: a loop that never ends
        rss_file.unlink()
    except (OSError, ValueError):
        kib = ru.ru_maxrss
    return Run(tuple(args), p.returncode, text, time.monotonic() - t0, kib / 1024, hung)


def timing_rows(extra: str = "", ranks: int = 4, steps: int = 30) -> str:
    return "step,rank,seconds\n" + "".join(
        f"{s},{r},1.0\n" for s in range(steps) for r in range(ranks)) + extra


def megatron(extra_iteration: str) -> str:
    """Megatron-LM ``training_log`` lines (format of megatron/training/training.py)."""
    line = ("[rank{r}]: [2025-11-13 16:27:01] iteration {i:>8}/  500000 | consumed samples: "
            "12800 | elapsed time per iteration (ms): 1234.5 | learning rate: 1.0E-04 |\n")
    return "".join(line.format(r=r, i=i) for i in range(1, 40) for r in range(2)) + \
        line.format(r=0, i=extra_iteration)


def make_corpus(d: Path) -> dict[str, Path]:
    """Hostile files by name (created under ``d``); ``/dev/zero`` is the endless stream."""
    files = {
        "rank 2**32": timing_rows("31,4294967296,1.0\n"),
        "step 20 digits": timing_rows("12345678901234567890,1,1.0\n"),
        "megatron 20-digit iteration": megatron("12345678901234567890"),
        "CR-only duplicated header": "step,rank,seconds,rank\r" + "".join(
            f"{s},{r},1.0,{r}\r" for s in range(30) for r in range(4)),
        "BOM CSV": "\ufeff" + timing_rows(),
        "NUL bytes": "step,rank,seconds\n0,0,1.0\n\0\0\0garbage\n",
        "NaN seconds": timing_rows("31,0,nan\n31,1,inf\n"),
        "deep JSON": "[" * 200_000 + "]" * 200_000,
        "10 MB line": "x" * (10 << 20) + "\n",
        "negative mask NCCL": '<system version="1"><cpu numaid="0" affinity="-1" arch="x86_64"'
                              ' vendor="GenuineIntel"/></system>\n',
        "negative cpuset hwloc": '<?xml version="1.0"?><topology><object type="Machine" '
                                 'os_index="0" cpuset="-5"/></topology>\n',
        "empty": "",
    }
    out: dict[str, Path] = {}
    for i, (name, text) in enumerate(files.items()):
        p = d / f"hostile{i}.txt"
        p.write_text(text, encoding="utf-8", newline="")
        out[name] = p
    sparse = d / "sparse.csv"
    with open(sparse, "wb") as fh:
        fh.truncate(2 << 30)   # 2 GiB of holes: costs no disk
    out["2 GiB sparse"] = sparse
    out["/dev/zero"] = Path("/dev/zero")
    out["directory"] = d
    return out

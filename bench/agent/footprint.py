"""The agent's idle footprint with the kernel-log follow on (issue 17 item 7: <= 0.5 % of a core,
<= 40 MB RSS), side by side with the same agent with ``--no-follow`` in the same run: both run
``--checks kernel_log`` on an idle kernel-log file, no controller, for ``--seconds`` (60);
CPU from psutil's cpu_times (user + system) over the window, RSS at the end; load printed.

    .venv/bin/python bench/agent/footprint.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def start(tmp: Path, follow: bool) -> subprocess.Popen[bytes]:
    name = "follow" if follow else "interval"
    log = tmp / f"kern-{name}.log"
    log.write_text("[    0.000000] Linux version 6.8.0 (buildd@lcy02-amd64)\n")
    argv = [sys.executable, "-m", "minutiae.cli.main", "agent", "--node", f"bench-{name}",
            "--kmsg", str(log), "--checks", "kernel_log", "--state-dir", str(tmp / name),
            "--metrics-listen", "", "--interval", "10",
            "--follow" if follow else "--no-follow"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        procs = {f: start(Path(d), f) for f in (True, False)}
        time.sleep(5)  # imports and the first cycle are start-up, not idle
        ps = {f: psutil.Process(p.pid) for f, p in procs.items()}
        c0 = {f: sum(p.cpu_times()[:2]) for f, p in ps.items()}
        t0 = time.monotonic()
        time.sleep(a.seconds)
        dt = time.monotonic() - t0
        load = os.getloadavg()[0]
        out = {f: (100 * (sum(p.cpu_times()[:2]) - c0[f]) / dt, p.memory_info().rss / 1e6)
               for f, p in ps.items()}
        for p in procs.values():
            p.terminate()
            p.wait(10)
    (fc, fr), (bc, br) = out[True], out[False]
    print(f"agent idle footprint over {dt:.0f} s (--checks kernel_log, interval 10 s), "
          f"load {load:.2f} on {os.cpu_count()} cores")
    print(f"  follow    cpu {fc:5.2f} % of a core   rss {fr:5.1f} MB")
    print(f"  no-follow cpu {bc:5.2f} % of a core   rss {br:5.1f} MB")
    print(f"  ratio follow/no-follow: cpu {fc / bc if bc else float('inf'):.2f}x  "
          f"rss {fr / br:.2f}x")
    ok = fc <= 0.5 and fr <= 40.0
    print("  PASS <= 0.5 % of a core, <= 40 MB" if ok else "  FAIL <= 0.5 % of a core, <= 40 MB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

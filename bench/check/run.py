"""Benchmark: one ``minutiae check`` cycle on the H100 sysfs snapshot + a 100,000-line kmsg.

Measured in a subprocess (CPU = user+sys of the child from ``wait4``, peak RSS = its ru_maxrss),
median of several repeats, side by side with baselines in the same run:

- ``python -c pass`` (bare interpreter start), ``python -c "import click"`` and
  ``python -c "import minutiae.cli.main"`` (the floor any click command starts from);
- the in-process cycle (``run_check`` only, what the agent pays every 10 s after start-up);
- ``python -c "import pynvml"``: on a live node the GPU check imports the NVML binding instead
  of parsing the capture this benchmark uses (add it minus the capture's parse to estimate).

Inputs (built under a temporary directory, realdata read in place):
- sysfs: ``../shared/realdata/infiniband/gpud/sys-class-infiniband-h100.0`` as class/infiniband
  plus 8 GPU and 8 NIC PCIe entries;
- GPUs: the 8x H100 ``nvidia-smi -q`` capture (535.161.08), as NVML is absent here;
- kmsg: 100,000 /dev/kmsg records whose messages are real kernel-log lines from
  ``../shared/realdata/kernel_logs`` (≈0.1 % fault lines, the rest benign).

Goal (issue 2): ≤ 100 ms CPU and ≤ 40 MB peak RSS per cycle.
Usage: .venv/bin/python bench/check/run.py [--repeats N] [--lines N] [--compare-src DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "realdata"
sys.path.insert(0, str(ROOT / "src"))

_PREFIX = re.compile(
    r"^(?:\d+,\d+,\d+,[^;]*;|\[ *\d+\.\d+\] |\[[A-Z][a-z]{2} [^\]]+\] |"
    r"kern *:[a-z]+ *: \S+ |\S+T\S+ \S+ kernel: |\d{4}-\d\d-\d\dT\S+ )")


def kmsg_lines(n: int, seed: int = 7) -> list[str]:
    from minutiae.node.sources.kernel_log.parse import parse_text

    benign: list[str] = []
    faults: list[str] = []
    for path in sorted((REAL / "kernel_logs").rglob("*")):
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            msg = _PREFIX.sub("", line).strip()
            if not msg or msg.startswith(" "):
                continue
            (faults if parse_text(msg) else benign).append(msg)
    rng = random.Random(seed)
    out = []
    usec = 5_000_000
    for seq in range(n):
        usec += rng.randint(10, 5000)
        msg = rng.choice(faults) if rng.random() < 0.001 else rng.choice(benign)
        out.append(f"6,{seq},{usec},-;{msg}")
    return out


def build(tmp: Path, lines: int) -> list[str]:
    from minutiae.testing.sysfs import ib_tree, pcie_device

    sysfs = ib_tree(tmp / "sys", REAL / "infiniband" / "gpud" / "sys-class-infiniband-h100.0")
    for i, bus in enumerate(("19", "3b", "4c", "5d", "9b", "bb", "cb", "db")):
        pcie_device(sysfs, f"0000:{bus}:00.0")
        pcie_device(sysfs, f"0000:{int(bus, 16) + 1:02x}:00.0", pci_class="0x020700", vendor="0x15b3")
        del i
    kmsg = tmp / "kmsg.log"
    kmsg.write_text("\n".join(kmsg_lines(lines)) + "\n")
    smi = REAL / "nvidia_smi" / "gpud" / "nvidia-smi-query.535.161.08.out.0.valid"
    return ["check", "--json", "--sysfs-root", str(sysfs), "--kmsg", str(kmsg),
            "--nvidia-smi-xml", str(smi), "--node", "bench", "--state-file", str(tmp / "state.json")]


_HWM = ("import atexit, os, sys\n"
        "def _hwm():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM:'):\n"
        "            os.write(3, line.split()[1].encode())\n"
        "atexit.register(_hwm)\n")


#: children run with bytecode caching, as an installed deployment does (pip writes .pyc files);
#: the cache goes to a temporary prefix, never into the source tree. Set by ``main``.
CHILD_ENV: dict[str, str] = {}


def measure(code: str, args: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """(cpu seconds, peak RSS MiB, wall seconds) of one child running ``code``.

    CPU comes from ``wait4``; peak RSS is the child's own ``VmHWM`` written at exit (``ru_maxrss``
    would include this parent's memory, which a vfork-style spawn shares until ``exec``)."""
    r, w = os.pipe()
    os.set_inheritable(w, True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    argv = [sys.executable, "-c", _HWM + code, *args]
    t0 = time.perf_counter()
    try:
        pid = os.posix_spawn(argv[0], argv, env or CHILD_ENV or dict(os.environ),
                             file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, w, 3)])
        os.close(w)
        hwm = b""
        while chunk := os.read(r, 64):
            hwm += chunk
        _, status, ru = os.wait4(pid, 0)
    finally:
        os.close(devnull)
        os.close(r)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc not in (0, 1, 2, 3):
        raise SystemExit(f"{code}: exit {rc}")
    return ru.ru_utime + ru.ru_stime, int(hwm or b"0") / 1024.0, wall


def in_process(args: list[str], repeats: int) -> tuple[float, float]:
    """(cold, steady) CPU seconds of ``run_check`` in one process, as the agent runs it: cold =
    a fresh ``CheckMemory`` (whole kmsg parsed), steady = the same memory again (+100 new lines)."""
    from minutiae.clock import SystemClock
    from minutiae.node.check import CheckConfig, CheckMemory, run_check

    kmsg = Path(args[args.index("--kmsg") + 1])
    cfg = CheckConfig(sysfs_root=Path(args[args.index("--sysfs-root") + 1]), kmsg=kmsg,
                      nvidia_smi_xml=Path(args[args.index("--nvidia-smi-xml") + 1]), node="bench")
    run_check(cfg, SystemClock())  # warm-up: modules imported, rules compiled
    cold, steady = [], []
    extra = kmsg_lines(100, seed=11)
    for _ in range(repeats):
        mem = CheckMemory()
        t0 = time.process_time()
        run_check(cfg, SystemClock(), memory=mem)
        cold.append(time.process_time() - t0)
        with kmsg.open("a") as fh:
            fh.write("\n".join(extra) + "\n")
        t0 = time.process_time()
        run_check(cfg, SystemClock(), memory=mem)
        steady.append(time.process_time() - t0)
    return statistics.median(cold), statistics.median(steady)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--compare-src", type=Path, default=None, metavar="DIR",
                    help="another tree's src/ (e.g. `git archive <rev> src | tar -x -C /tmp/old`): "
                    "its steady run is measured interleaved with this one's, as a ratio")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="compile every module at every start (PYTHONDONTWRITEBYTECODE=1)")
    a = ap.parse_args()
    if not REAL.exists():
        raise SystemExit(f"missing {REAL} (../shared is not beside this clone)")
    with tempfile.TemporaryDirectory(prefix="minutiae-bench-check-") as d:
        args = build(Path(d), a.lines)
        state = Path(args[args.index("--state-file") + 1])
        cli = "from minutiae.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
        CHILD_ENV.update({k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
        if not a.no_bytecode_cache:
            CHILD_ENV["PYTHONPYCACHEPREFIX"] = str(Path(d) / "pycache")
            for code in ("import minutiae.cli.main", cli):  # warm the bytecode cache
                measure(code, args)
        else:  # installed .pyc files of the stdlib and site-packages are used, ours are not
            CHILD_ENV["PYTHONDONTWRITEBYTECODE"] = "1"
        # the rows are measured round-robin, one of each per repeat, so that the load of a
        # shared machine falls on all of them alike (medians of per-row samples)
        rows_code = {"base": ("pass", []), "click": ("import click", []),
                     "imp": ("import minutiae.cli.main", []), "nvml": ("import pynvml", [])}
        samples: dict[str, list[tuple[float, float, float]]] = {
            k: [] for k in (*rows_code, "cold", "steady", "plain", "other")}
        plain_args = [x for x in args if x != "--json"]
        other_env: dict[str, str] | None = None
        other_args = list(args)
        if a.compare_src is not None:
            other_env = dict(CHILD_ENV, PYTHONPATH=str(a.compare_src.resolve()))
            if "PYTHONPYCACHEPREFIX" in other_env:
                other_env["PYTHONPYCACHEPREFIX"] += "-other"
            other_args[other_args.index("--state-file") + 1] = str(Path(d) / "state-other.json")
            for _ in range(2):  # bytecode cache, then the state file's cursor
                measure(cli, other_args, other_env)
        for _ in range(a.repeats):
            for key, (code, cargs) in rows_code.items():
                samples[key].append(measure(code, cargs))
            state.unlink(missing_ok=True)
            samples["cold"].append(measure(cli, args))
            samples["steady"].append(measure(cli, args))  # the state file now holds the cursor
            samples["plain"].append(measure(cli, plain_args))  # text to a file, as slurmd's log
            if other_env is not None:
                samples["other"].append(measure(cli, other_args, other_env))

        def med(key: str) -> tuple[float, float, float]:
            return tuple(statistics.median(r[i] for r in samples[key]) for i in range(3))  # type: ignore[return-value]

        base, clk, imp, nvml = med("base"), med("click"), med("imp"), med("nvml")
        cold, steady, plain = med("cold"), med("steady"), med("plain")
        ip_cold, ip_steady = in_process(args, a.repeats)
    print(f"minutiae check cycle: H100 sysfs snapshot (9 IB ports) + 16 PCIe devices + 8x H100 nvidia-smi -q "
          f"+ {a.lines:,}-line kmsg; median of {a.repeats} runs (rows interleaved), bytecode cache "
          f"{'off' if a.no_bytecode_cache else 'on'}")
    print(f"{'what':<58}{'CPU ms':>9}{'peak RSS MiB':>14}{'wall ms':>9}")
    rows = (("python -c pass (baseline)", base),
            ("python -c 'import click' (the CLI framework alone)", clk),
            ("python -c 'import minutiae.cli.main'", imp),
            ("python -c 'import pynvml' (a live node's GPU source)", nvml),
            ("minutiae check --json, first run (whole kmsg parsed)", cold),
            ("minutiae check --json, next run (state file: cursor)", steady),
            ("minutiae check > file, next run (HealthCheckProgram)", plain))
    for name, (cpu, rss, wall) in rows:
        print(f"{name:<58}{cpu * 1000:>9.1f}{rss:>14.1f}{wall * 1000:>9.1f}")
    print(f"{'run_check() in process, first cycle':<58}{ip_cold * 1000:>9.1f}")
    print(f"{'run_check() in process, next cycle (+100 kmsg lines)':<58}{ip_steady * 1000:>9.1f}")
    if a.compare_src is not None:
        other = tuple(statistics.median(r[i] for r in samples["other"]) for i in range(3))
        ratios = [n[0] / o[0] for n, o in zip(samples["steady"], samples["other"], strict=True)]
        print(f"{'next run, --compare-src tree':<58}{other[0] * 1000:>9.1f}{other[1]:>14.1f}{other[2] * 1000:>9.1f}")
        print(f"next run: this tree / --compare-src tree = {statistics.median(ratios):.2f} "
              f"(median of per-repeat ratios)")
    for label, (cpu, rss, _) in (("first run", cold), ("next run", steady)):
        print(f"{label}: CPU {cpu / base[0]:.1f}x the bare interpreter ({(cpu - base[0]) * 1000:.1f} ms beyond it), "
              f"RSS {rss / base[1]:.1f}x; goal ≤ 100 ms CPU {'met' if cpu <= 0.100 else 'NOT met'}, "
              f"≤ 40 MB RSS {'met' if rss <= 40 else 'NOT met'}")


if __name__ == "__main__":
    main()

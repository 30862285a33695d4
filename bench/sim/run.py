"""Benchmark: `minutiae sim` (1,024 nodes x 8 GPUs x 7 days by default) and `minutiae eval` on
its output: wall time, CPU time and peak RSS of each command (a child process, measured with
wait4). eval runs once per detector (`--detector NAME`, each under an address-space limit of
--mem-limit GiB so that a detector that needs more is reported instead of exhausting the shared
machine); then "eval" runs once with every detector that fitted, in --jobs worker processes
(peak RSS: the largest of the process and its workers). Baselines measured in the same run:

- sim vs "write the same files": a plain loop that writes the dataset's files again (same
  count, same sizes, os.open/os.write) — the I/O floor of producing that dataset;
- eval vs "read the same files": a plain loop that reads every file of the dataset once.

Medians of --repeats runs. Usage: .venv/bin/python bench/sim/run.py [--nodes N] [--days D]
[--repeats R] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).with_name("minutiae")


def run(cmd: list[str], mem_gib: float | None = None) -> tuple[float, float, float, int]:
    """(wall s, cpu s, peak RSS MiB, exit code) of one child process."""
    import resource
    import subprocess

    def limit() -> None:
        if mem_gib:
            b = int(mem_gib * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (b, b))

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, preexec_fn=limit)  # noqa: PLW1509
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0, proc.returncode


def files_of(root: Path) -> list[tuple[Path, int]]:
    out = []
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            out.append((p, p.stat().st_size))
    return out


def write_baseline(files: list[tuple[Path, int]], root: Path, dst: Path) -> float:
    t0 = time.perf_counter()
    blob = os.urandom(max((s for _p, s in files), default=0))
    made: set[str] = set()
    for p, size in files:
        q = dst / p.relative_to(root)
        d = str(q.parent)
        if d not in made:
            os.makedirs(d, exist_ok=True)
            made.add(d)
        fd = os.open(q, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, blob[:size])
        os.close(fd)
    return time.perf_counter() - t0


def read_baseline(files: list[tuple[Path, int]]) -> float:
    t0 = time.perf_counter()
    for p, _s in files:
        with open(p, "rb") as fh:
            while fh.read(1 << 20):
                pass
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="keep the last dataset here")
    ap.add_argument("--mem-limit", type=float, default=6.0, help="GiB per eval detector process")
    ap.add_argument("--jobs", type=int, default=2, help="eval worker processes (the machine has 2 cores)")
    a = ap.parse_args()
    from minutiae.sim.detectors import DETECTORS

    work = Path(tempfile.mkdtemp(prefix="minutiae-bench-sim-"))
    rows: dict[str, list[tuple[float, float, float]]] = {"sim": [], "eval": []}
    per: dict[str, list[tuple[float, float, float, int]]] = {d.name: [] for d in DETECTORS}
    base_w: list[float] = []
    base_r: list[float] = []
    info = ""
    try:
        for i in range(a.repeats):
            out = work / "data"
            if out.exists():
                shutil.rmtree(out)
            w, c, r, rc = run([str(BIN), "sim", "--nodes", str(a.nodes), "--gpus-per-node", "8",
                               "--days", str(a.days), "--seed", "1", "--out", str(out), "--quiet"])
            if rc:
                raise SystemExit(f"minutiae sim failed (exit {rc})")
            rows["sim"].append((w, c, r))
            for d in DETECTORS:
                per[d.name].append(run([str(BIN), "eval", str(out), "--json", "--jobs", "1",
                                        "--detector", d.name], a.mem_limit))
            ok = [name for name, v in per.items() if v[-1][3] == 0]
            cmd = [str(BIN), "eval", str(out), "--json", "--jobs", str(a.jobs)]
            for name in ok:
                cmd += ["--detector", name]
            w, c, r, rc = run(cmd, a.mem_limit)
            if rc:
                raise SystemExit(f"minutiae eval failed (exit {rc})")
            rows["eval"].append((w, c, r))
            files = files_of(out)
            total = sum(s for _p, s in files)
            info = f"dataset: {len(files)} files, {total / 2**20:.0f} MiB"
            dst = work / "baseline"
            base_w.append(write_baseline(files, out, dst))
            shutil.rmtree(dst)
            base_r.append(read_baseline(files))
            print(f"repeat {i + 1}: sim {rows['sim'][-1][0]:.1f} s, eval {rows['eval'][-1][0]:.1f} s, "
                  f"write floor {base_w[-1]:.1f} s, read floor {base_r[-1]:.1f} s", file=sys.stderr)
        if a.keep:
            shutil.rmtree(a.keep, ignore_errors=True)
            shutil.move(str(work / "data"), a.keep)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: tuple(statistics.median(r[j] for r in v) for j in range(3)) for k, v in rows.items()}
    bw, br = statistics.median(base_w), statistics.median(base_r)
    print(f"minutiae sim + eval, {a.nodes} nodes x 8 GPUs x {a.days:g} days, median of {a.repeats}; {info}")
    print(f"{'':14}{'wall s':>9}{'cpu s':>9}{'peak RSS MiB':>14}{'baseline s':>12}{'ratio':>8}")
    print(f"{'sim':14}{med['sim'][0]:9.1f}{med['sim'][1]:9.1f}{med['sim'][2]:14.0f}{bw:12.1f}{med['sim'][0] / bw:8.2f}"
          "   (baseline: write the same files with a plain loop)")
    print(f"{'eval (-j' + str(a.jobs) + ')':14}{med['eval'][0]:9.1f}{med['eval'][1]:9.1f}{med['eval'][2]:14.0f}{br:12.1f}"
          f"{med['eval'][0] / br:8.2f}   (baseline: read the same files with a plain loop)")
    for name, v in per.items():
        wm = statistics.median(x[0] for x in v)
        status = "ok" if all(x[3] == 0 for x in v) else f"FAILED (exit {v[-1][3]}; limit {a.mem_limit:g} GiB)"
        print(f"  alone {name:12}{wm:7.1f} s wall {statistics.median(x[1] for x in v):7.1f} s cpu "
              f"{statistics.median(x[2] for x in v):7.0f} MiB  {status}")
    tot = med["sim"][0] + med["eval"][0]
    peak = max(med["sim"][2], med["eval"][2])
    print(f"{'together':14}{tot:9.1f}{med['sim'][1] + med['eval'][1]:9.1f}{peak:14.0f}"
          f"   goal: <= 120 s and <= 4096 MiB -> {'met' if tot <= 120 and peak <= 4096 else 'NOT met'}")


if __name__ == "__main__":
    main()

"""Benchmark: `minutiae sim` (1,024 nodes x 8 GPUs x 7 days by default) and then `minutiae eval`
on its output, each with its default options, as a user runs them. The one number that matters
is their sum: wall time, CPU time and peak memory of sim + eval (goal: <= 120 s and <= 4 GiB
on the 2-core build machine).

Each command runs as a child process and is measured as a process tree (sim and eval use
worker processes, which are not all children that the command waits for): every 0.1 s the tree's
processes are read from /proc (psutil); CPU = the sum over every process seen of its last user +
system time, peak = the largest sum of the tree's resident memory at one moment (workers
running at the same time count together).

Baselines measured in the same run:
- sim vs "write the same files": a plain loop that writes the dataset's files again (same
  count, same sizes, os.open/os.write): the I/O floor of producing that dataset;
- eval vs "read the same files": a plain loop that reads every file of the dataset once;
- per detector: `eval --detector NAME` alone (--jobs 1), its wall, CPU and peak (skip with
  --no-alone), each under an address-space limit of --mem-limit GiB.

Medians of --repeats runs. Usage:
    .venv/bin/python bench/sim/run.py [--nodes 1024] [--days 7] [--repeats 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

BIN = Path(sys.executable).with_name("minutiae")
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Measure:
    wall: float
    cpu: float
    peak_mib: float
    rc: int
    stdout: str = ""


def run(cmd: list[str], mem_gib: float | None = None, keep_stdout: bool = False) -> Measure:
    """One command as a process tree: wall s, CPU s (all its processes), peak summed RSS."""
    import resource

    def limit() -> None:
        if mem_gib:
            b = int(mem_gib * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (b, b))

    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, preexec_fn=limit)  # noqa: PLW1509
        top = psutil.Process(proc.pid)
        cpu: dict[int, float] = {}
        peak = 0.0
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            rss = 0.0
            try:
                procs = [top, *top.children(recursive=True)]
            except psutil.Error:
                procs = []
            for p in procs:
                try:
                    with p.oneshot():
                        t = p.cpu_times()
                        cpu[p.pid] = t.user + t.system
                        rss += p.memory_info().rss
                except psutil.Error:
                    continue
            peak = max(peak, rss)
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace") if keep_stdout else ""
    # the command's own rusage counts it and the descendants it (or they) waited for exactly;
    # the sampled sum counts every process seen, to within one 0.1 s sample each
    sampled = sum(cpu.values())
    waited = ru.ru_utime + ru.ru_stime
    return Measure(wall, max(sampled, waited), max(peak / 2**20, ru.ru_maxrss / 1024.0),
                   os.waitstatus_to_exitcode(status), text)


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


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _med(xs: list[Measure]) -> tuple[float, float, float]:
    return (statistics.median(x.wall for x in xs), statistics.median(x.cpu for x in xs),
            statistics.median(x.peak_mib for x in xs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="keep the last dataset here")
    ap.add_argument("--mem-limit", type=float, default=6.0, help="GiB per alone-detector eval")
    ap.add_argument("--no-alone", action="store_true", help="skip the per-detector eval runs")
    a = ap.parse_args()
    from minutiae.sim.eval.detectors import detectors

    DETECTORS = detectors()

    work = Path(tempfile.mkdtemp(prefix="minutiae-bench-sim-"))
    sims: list[Measure] = []
    evals: list[Measure] = []
    per: dict[str, list[Measure]] = {d.name: [] for d in DETECTORS}
    in_run: dict[str, list[float]] = {d.name: [] for d in DETECTORS}
    base_w: list[float] = []
    base_r: list[float] = []
    loads: list[float] = []
    info = ""
    try:
        for i in range(a.repeats):
            out = work / "data"
            if out.exists():
                shutil.rmtree(out)
            loads.append(os.getloadavg()[0])
            m = run([str(BIN), "sim", "--nodes", str(a.nodes), "--gpus-per-node", "8",
                     "--days", str(a.days), "--seed", "1", "--out", str(out), "--quiet"])
            if m.rc:
                raise SystemExit(f"minutiae sim failed (exit {m.rc})")
            sims.append(m)
            m = run([str(BIN), "eval", str(out), "--json"], keep_stdout=True)
            if m.rc:
                raise SystemExit(f"minutiae eval failed (exit {m.rc})")
            evals.append(m)
            for d in json.loads(m.stdout)["detectors"]:
                if d["name"] in in_run:
                    in_run[d["name"]].append(float(d["seconds"]))
            if not a.no_alone:
                for d in DETECTORS:
                    per[d.name].append(run([str(BIN), "eval", str(out), "--json", "--jobs", "1",
                                            "--detector", d.name], a.mem_limit))
            files = files_of(out)
            info = f"dataset: {len(files):,} files, {sum(s for _p, s in files) / 2**20:.0f} MiB"
            dst = work / "baseline"
            base_w.append(write_baseline(files, out, dst))
            shutil.rmtree(dst)
            base_r.append(read_baseline(files))
            print(f"repeat {i + 1}: sim {sims[-1].wall:.1f} s, eval {evals[-1].wall:.1f} s, "
                  f"write floor {base_w[-1]:.1f} s, read floor {base_r[-1]:.1f} s, load {loads[-1]:.1f}",
                  file=sys.stderr)
        if a.keep:
            shutil.rmtree(a.keep, ignore_errors=True)
            shutil.move(str(work / "data"), a.keep)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _report(a, sims, evals, base_w, base_r, loads, info, per, in_run)


def _report(a: argparse.Namespace, sims: list[Measure], evals: list[Measure], base_w: list[float],
            base_r: list[float], loads: list[float], info: str, per: dict[str, list[Measure]],
            in_run: dict[str, list[float]]) -> None:
    """The figures side by side with the plain-loop baselines of the same run, as ratios."""
    sw, sc, sp = _med(sims)
    ew, ec, ep = _med(evals)
    bw, br = statistics.median(base_w), statistics.median(base_r)
    tw = statistics.median(s.wall + e.wall for s, e in zip(sims, evals, strict=True))
    tc = statistics.median(s.cpu + e.cpu for s, e in zip(sims, evals, strict=True))
    peak = max(sp, ep)
    print(f"minutiae sim + eval (default options), {a.nodes} nodes x 8 GPUs x {a.days:g} days, "
          f"median of {a.repeats}; {info}; 1-min load average before each repeat "
          f"{', '.join(f'{x:.1f}' for x in loads)} on {os.cpu_count()} CPUs")
    print(f"at commit {_git('rev-parse', '--short', 'HEAD')}"
          f"{' (+ uncommitted changes)' if _git('status', '--porcelain', '--untracked-files=no') else ''};"
          f" stragglers code: {_git('log', '-1', '--format=%h %s', '--', 'src/minutiae/analyses/stragglers*')[:100]}")
    print(f"{'':16}{'wall s':>8}{'cpu s':>8}{'peak MiB':>10}{'baseline s':>12}{'ratio':>7}")
    print(f"{'sim':16}{sw:8.1f}{sc:8.1f}{sp:10.0f}{bw:12.1f}{sw / bw:7.2f}   (write the same files, plain loop)")
    print(f"{'eval':16}{ew:8.1f}{ec:8.1f}{ep:10.0f}{br:12.1f}{ew / br:7.2f}   (read the same files, plain loop)")
    print(f"{'SIM + EVAL':16}{tw:8.1f}{tc:8.1f}{peak:10.0f}   goal <= 120 s and <= 4096 MiB: "
          f"{'met' if tw <= 120 and peak <= 4096 else 'NOT met'}")
    print("per detector: seconds inside the default eval run; alone = `eval --detector NAME --jobs 1` "
          "(dataset load and scoring included)")
    for name in per:
        line = f"  {name:12}{statistics.median(in_run[name]) if in_run[name] else float('nan'):7.1f} s in run"
        v = per[name]
        if v:
            w, c, p = _med(v)
            ok = "ok" if all(x.rc == 0 for x in v) else f"FAILED (exit {v[-1].rc}; limit {a.mem_limit:g} GiB)"
            line += f"; alone {w:6.1f} s wall {c:6.1f} s cpu {p:6.0f} MiB  {ok}"
        print(line)


if __name__ == "__main__":
    main()

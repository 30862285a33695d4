"""Noisy neighbours on a built /proc-like tree (with cgroup cpusets), the pinning proposal, and
one test on this machine's real /proc with a real busy process pinned onto the job's CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minutiae.analyses.topology.neighbours import find_neighbours, job_members, pinning
from minutiae.analyses.topology.read_procs import online_cpus, read_processes, sample_processes
from minutiae.cli.main import main
from minutiae.testing import FakeClock

STAT = "{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 100 0 0 0 {ut} {st} 0 0 20 0 1 0 100 " \
       "1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 {cpu} 0 0 0 0 0"


def _proc(root: Path, pid: int, comm: str, ppid: int, cpus: str, ticks: int = 0, cpu: int = 0,
          cgroup: str = "0::/user.slice", cmdline: str = "x") -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "status").write_text(f"Name:\t{comm}\nTgid:\t{pid}\nPPid:\t{ppid}\n"
                              f"Cpus_allowed:\tff\nCpus_allowed_list:\t{cpus}\n")
    (d / "stat").write_text(STAT.format(pid=pid, comm=comm, ppid=ppid, ut=ticks, st=0, cpu=cpu))
    (d / "cgroup").write_text(cgroup + "\n")
    (d / "cmdline").write_text(cmdline.replace(" ", "\x00"))


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    proc = tmp_path / "proc"
    cg = tmp_path / "cgroup"
    _proc(proc, 1, "systemd", 0, "0-7", cgroup="0::/init.scope")
    _proc(proc, 2, "kthreadd", 0, "0-7", cmdline="")
    _proc(proc, 30, "ksoftirqd/4", 2, "4", cmdline="")                    # kernel thread
    _proc(proc, 100, "python", 1, "4-7", cpu=5)                           # the job
    _proc(proc, 101, "pt_data_worker", 100, "4-7", cpu=6)                 # the job's child
    _proc(proc, 200, "dcgm-exporter", 1, "0-7", cpu=4,
          cgroup="0::/system.slice/dcgm-exporter.service")                # cpuset narrows it
    _proc(proc, 300, "my (odd) name", 1, "5", cpu=5)                      # pinned onto the job
    _proc(proc, 400, "sshd", 1, "0-7", cpu=1, cgroup="0::/system.slice/ssh.service")
    eff = cg / "system.slice" / "dcgm-exporter.service"
    eff.mkdir(parents=True)
    (eff / "cpuset.cpus.effective").write_text("3-4\n")
    return proc, cg


def test_read_processes(tree: tuple[Path, Path]) -> None:
    proc, cg = tree
    ps = read_processes(proc, cg)
    assert ps[200].cpus == (3, 4)  # Cpus_allowed_list 0-7 narrowed by the cgroup cpuset
    assert ps[300].name == "my (odd) name" and ps[300].last_cpu == 5
    assert ps[30].kernel and not ps[100].kernel
    assert online_cpus(proc) == tuple(range(8))


def test_neighbours_and_pinning(tree: tuple[Path, Path]) -> None:
    proc, cg = tree
    ps = read_processes(proc, cg)
    members = job_members(ps, (100,))
    assert members == {100, 101}
    found = find_neighbours(ps, (4, 5, 6, 7), members, shares=None, all_cpus=online_cpus(proc))
    # pinned onto job CPUs: always listed; unpinned ones only when they ran on a job CPU
    assert [(n.pid, n.overlap, n.on_job_cpu, n.unit) for n in found] == [
        (200, (4,), True, "dcgm-exporter.service"), (300, (5,), True, None)]
    lines = pinning(found, (0, 1, 2, 3))
    assert lines == ["systemctl set-property dcgm-exporter.service AllowedCPUs=0-3",
                     "taskset -a -p -c 0-3 300  # my ?odd? name"]


def test_cpu_share_from_two_samples(tree: tuple[Path, Path]) -> None:
    proc, cg = tree
    clock = FakeClock()
    hz = os.sysconf("SC_CLK_TCK")

    class Busy(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            # sshd burns 1.5 s of CPU during the 2 s sample
            stat = proc / "400" / "stat"
            stat.write_text(STAT.format(pid=400, comm="sshd", ppid=1, ut=int(1.5 * hz), st=0, cpu=1))

    clock = Busy()
    ps, shares = sample_processes(clock, 2.0, proc, cg)
    assert clock.sleeps == [2.0]
    assert shares[400] == pytest.approx(0.75)
    found = find_neighbours(ps, (0, 1), {100, 101}, shares, online_cpus(proc))
    assert [n.pid for n in found] == [400]
    assert found[0].cpu_share == pytest.approx(0.75)


def test_cli_on_tree(tree: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    proc, cg = tree
    rc = main(["neighbours", "--pid", "100", "--proc-root", str(proc), "--cgroup-root", str(cg),
               "--interval", "0", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["job_cpus"] == [4, 5, 6, 7] and out["free_cpus"] == [0, 1, 2, 3]
    assert [n["pid"] for n in out["neighbours"]] == [200, 300]
    assert main(["neighbours", "--pid", "999", "--proc-root", str(proc), "--interval", "0"]) == 3
    assert "no such process: 999" in capsys.readouterr().err
    assert main(["neighbours", "--proc-root", str(proc)]) == 3
    assert "--job-cpus" in capsys.readouterr().err


def test_real_proc_finds_a_busy_process_pinned_on_the_job_cpu() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or not Path("/proc/self/status").exists():
        pytest.skip("needs Linux /proc and 2 CPUs")
    job_cpu = cpus[-1]
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(busy.pid, {job_cpu})
        time.sleep(0.2)
        from minutiae.clock import SystemClock

        ps, shares = sample_processes(SystemClock(), 0.5, "/proc", "/sys/fs/cgroup")
        found = find_neighbours(ps, (job_cpu,), {os.getpid()}, shares, online_cpus("/proc"))
        mine = [n for n in found if n.pid == busy.pid]
        assert mine, [n.pid for n in found]
        assert mine[0].overlap == (job_cpu,)
        assert mine[0].cpu_share is not None and mine[0].cpu_share > 0  # busy, however loaded the host
        assert "taskset -a -p -c" in "\n".join(pinning(mine, tuple(c for c in cpus if c != job_cpu)))
    finally:
        busy.kill()
        busy.wait()


INTERRUPTS = """\
           CPU0       CPU1       CPU2       CPU3       CPU4       CPU5       CPU6       CPU7
  0:         36          0          0          0          0          0          0          0   IO-APIC   2-edge      timer
 98:          0          0          0          0     912345          0          0          0  IR-PCI-MSIX-0000:1a:00.0   1-edge      mlx5_comp0@pci:0000:1a:00.0
 99:       5000          0          0          0          0          0          0          0  IR-PCI-MSIX-0000:1a:00.0   2-edge      mlx5_comp1@pci:0000:1a:00.0
NMI:          0          0          0          0          0          0          0          0   Non-maskable interrupts
LOC:     100000     100000     100000     100000     100000     100000     100000     100000   Local timer interrupts
"""


def test_irqs_on_job_cpus_and_irqbalance(tree: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from minutiae.analyses.topology.irqs import irq_report
    from minutiae.analyses.topology.read_procs import read_irqs

    proc, cg = tree
    (proc / "interrupts").write_text(INTERRUPTS)
    for irq, aff in ((0, "0"), (98, "4-7"), (99, "0-3")):
        (proc / "irq" / str(irq)).mkdir(parents=True)
        (proc / "irq" / str(irq) / "smp_affinity_list").write_text(aff + "\n")
    _proc(proc, 500, "irqbalance", 1, "0-7", cgroup="0::/system.slice/irqbalance.service")
    ps = read_processes(proc, cg)
    rep = irq_report(read_irqs(proc), ps, (4, 5, 6, 7))
    assert [(i.irq, i.name, i.overlap, i.on_job) for i in rep.irqs] == [
        (98, "mlx5_comp0@pci:0000:1a:00.0", (4, 5, 6, 7), 912345)]  # 99 fired only on CPU0
    assert rep.irqbalance == (500,)
    adv = rep.advice((4, 5, 6, 7), (0, 1, 2, 3))
    assert adv[0] == "echo 0-3 > /proc/irq/98/smp_affinity_list  # mlx5_comp0@pci:0000:1a:00.0"
    assert "IRQBALANCE_BANNED_CPULIST=4-7" in adv[1]
    assert main(["neighbours", "--job-cpus", "4-7", "--proc-root", str(proc), "--cgroup-root",
                 str(cg), "--interval", "0", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["irq"]["irqbalance_running"] is True and out["irq"]["irqs"][0]["irq"] == 98
    (proc / "interrupts").unlink()
    assert irq_report(read_irqs(proc), ps, (4,)).to_json()["irqbalance_running"] is None


def test_a_missing_cgroup_root_is_said(tree: tuple[Path, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    proc, _ = tree
    rc = main(["neighbours", "--pid", "100", "--proc-root", str(proc), "--cgroup-root",
               str(tmp_path / "nope"), "--interval", "0", "--json"])
    cap = capsys.readouterr()
    assert rc == 1 and [n["pid"] for n in json.loads(cap.out)["neighbours"]] == [200, 300]
    assert f"--cgroup-root {tmp_path / 'nope'}: not a directory" in cap.err
    assert "units are unknown" in cap.err

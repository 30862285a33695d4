"""The hostile corpus (``fuzz_hostile.make_corpus``) through every command that takes a file,
in process (``minutiae.cli.main.main``, as the console script runs it): every run returns an
exit code in {0, 1, 3} (2 only for a usage error, never for a file), at most one error line, no
exception escapes, none hangs (a CPU-time alarm, ITIMER_PROF: a shared machine's load stretches
wall time, not the CPU a loop burns; a wall-clock backstop catches a blocked read). Peak RSS is measured in test_hostile_commands (per
child); here the counts are printed for the issue's closing note."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzz_hostile import make_corpus
from fuzz_inproc import alarms, fake_scontrol, run_case

from minutiae.cli.main import main
from minutiae.testing.limits import memory_cap

AGENT = ["agent", "--cycles", "1", "--no-follow", "--metrics-listen", "", "--state-dir", "st",
         "--no-nvml", "--kmsg", "{empty}"]
CHECK = ["check", "--no-nvml", "--kmsg", "{empty}"]
SERVE = ["serve", "--token-file", "{tok}", "--db", "c.db"]   # never binds: fuzz_inproc.no_server
TEMPLATES = [
    ["logscan", "{f}"], ["logscan", "--json", "{f}"], ["logscan", "--rules", "{f}", "{empty}"],
    ["stragglers", "{f}"], ["stragglers", "--json", "{f}"], ["stragglers", "--fleet", "{f}",
                                                             "{empty}"],
    ["regress", "--runs", "{f}"], ["regress", "--db", "{f}"],
    ["topo", "--from", "{f}"], ["topo", "--from", "{f}", "--json"],
    ["check", "--no-nvml", "--kmsg", "{f}"], ["check", "--no-nvml", "--nvidia-smi-xml", "{f}"],
    ["check", "--no-nvml", "--ibstat", "{f}"], ["check", "--no-nvml", "--dcgm", "{f}"],
    ["check", "--no-nvml", "--nvlink-status", "{f}"], ["check", "--no-nvml", "--sysfs-root",
                                                       "{f}"],
    ["policy", "show", "--policy", "{f}"], ["whatchanged", "{f}", "{f}"],
    ["slownodes", "{f}"], ["slownodes", "{dataset}", "--fleet", "{f}"],
    ["slownodes", "{dataset}", "--jobs", "{f}"], ["eval", "{f}"], ["backtest", "{f}"],
    ["backtest", "{dataset}", "--policy", "{f}"], ["backtest", "{dataset}", "--against", "{f}"],
    ["sim", "--nodes", "2", "--days", "0.05", "--out", "{out}", "--profile", "{f}"],
    ["check", "--no-nvml", "--kmsg", "{empty}", "--state-file", "{f}"],
    # issue 16 item 6, every other option that reads a file (s16fz): the agent's sources and
    # token, the fleet commands' token, serve's config files, topo, neighbours, history
    [*AGENT, "--controller", "http://127.0.0.1:1", "--token-file", "{f}"],
    [*AGENT[:-1], "{f}"], [*AGENT, "--sysfs-root", "{f}"], [*AGENT, "--proc-root", "{f}"],
    [*AGENT, "--nvidia-smi-xml", "{f}"], [*AGENT, "--dcgm", "{f}"],
    [*CHECK, "--proc-root", "{f}"], [*CHECK, "--perfquery", "{f}"],
    [*CHECK, "--ibv-devinfo", "{f}"], [*CHECK, "--slurm", "--slurm-conf", "{f}"],
    ["impact", "--speedup", "1%", "--where", "NCCL>=2.21", "--runs", "{f}"],
    ["impact", "--speedup", "1%", "--where", "NCCL>=2.21", "--db", "{f}"],
    ["whatchanged", "r1", "r2", "--runs", "{f}"], ["whatchanged", "r1", "r2", "--db", "{f}"],
    ["pause", "--reason", "x", "--controller", "http://127.0.0.1:1", "--token-file", "{f}"],
    ["unpause", "--controller", "http://127.0.0.1:1", "--token-file", "{f}"],
    ["resolve", "gpu001", "--reason", "x", "--controller", "http://127.0.0.1:1",
     "--token-file", "{f}"],
    ["neighbours", "--job-cpus", "0-1", "--interval", "0.01", "--proc-root", "{f}"],
    ["neighbours", "--job-cpus", "0-1", "--interval", "0.01", "--cgroup-root", "{f}"],
    ["regress", "--runs", "{dataset}/runs.csv", "--rollouts", "{f}"],
    ["regress", "--runs", "{dataset}/runs.csv", "--record-log", "{f}"],
    ["serve", "--config", "{f}"], ["serve", "--token-file", "{f}"],
    [*SERVE, "--policy", "{f}"], [*SERVE, "--read-token-file", "{f}"],
    [*SERVE, "--agent-tokens", "{f}"], [*SERVE, "--backend", "slurm", "--slurm-conf", "{f}"],
    [*SERVE, "--backend", "kubernetes", "--kubeconfig", "{f}"],
    ["topo", "--sysfs-root", "{f}"], ["topo", "--learn", "{f}"],
    ["topo", "--from", "{topo}", "--check", "--expect", "{f}"],
    ["stragglers", "--follow", "--idle-exit", "0.5", "--poll", "0.05", "{f}"],
    ["logscan", "{f}", "{f}"],
]
#: templates that write to ``{f}``: run only on the corpus's own files, never on a device such as
#: /dev/zero (a regression would replace the machine's device node)
WRITES = ("--state-file",)
COUNTS: Counter[str] = Counter()
PER_COMMAND: dict[str, Counter[str]] = {}
TOPO = Path(__file__).parents[1] / "data" / "nccl_topo_public" / "oci-bm-gpu-h100-8-topology.xml"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    # an unbounded read fails the test with MemoryError instead of taking the machine
    with memory_cap():
        d = tmp_path_factory.mktemp("corpus")
        files = make_corpus(d)
        files.pop("2 GiB sparse")          # bounded by size up front; in test_hostile_commands
        (d / "empty.log").write_text("")
        (d / "tok").write_text("fuzz-token-0123456789abc\n")
        # a real dataset for the commands whose other inputs are a directory (slownodes, backtest)
        assert main(["sim", "--nodes", "2", "--days", "0.05", "--out", str(d / "dataset"), "--quiet"]) == 0
        yield files
        print(f"\nfuzz corpus: {COUNTS['cases']} cases, {COUNTS['traceback']} tracebacks, "
              f"{COUNTS['hang']} hangs, {COUNTS['bad_exit']} bad exits")
        for cmd, c in sorted(PER_COMMAND.items()):
            print(f"  {cmd}: {c['cases']} cases, {c['cases'] - c['ok']} failed")


@pytest.mark.parametrize("template", TEMPLATES, ids=[" ".join(t[:2]) for t in TEMPLATES])
def test_every_hostile_file_through_the_command(corpus: dict[str, Path], template: list[str],
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("MINUTIAE_TOKEN", "MINUTIAE_READ_TOKEN", "MINUTIAE_CONTROLLER", "MINUTIAE_CONFIG",
                 "KUBECONFIG", "SLURM_CONF"):
        monkeypatch.delenv(name, raising=False)
    empty = next(iter(corpus.values())).parent / "empty.log"
    monkeypatch.setenv("PATH", fake_scontrol(tmp_path))
    failures = []
    with alarms():
        for name, path in corpus.items():
            if any(w in template for w in WRITES) and path.parent != empty.parent:
                continue
            argv = [a.format(f=path, empty=empty, dataset=empty.parent / "dataset",
                             out=tmp_path / "out", tok=empty.parent / "tok", topo=TOPO)
                    for a in template]
            out = run_case(argv, lambda: capsys.readouterr().err, tmp_path)
            COUNTS["cases"] += 1
            COUNTS[out.kind] += 1
            c = PER_COMMAND.setdefault(template[0], Counter())
            c["cases"] += 1
            c[out.kind] += 1
            if out.problem:
                failures.append(f"{name}: {out.problem}")
    assert not failures, "\n".join(failures)

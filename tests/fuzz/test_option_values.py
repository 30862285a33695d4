"""Hostile option VALUES through every option of every command that reaches a parser, a URL, a
number, a path or a scheduler command line (issue 16 item 6; the files themselves are in
test_corpus_every_command): NaN, -1, 0, 1e309, inf, 20 digits, empty, 10,000 characters, a
newline, a URL with a newline and shell metacharacters. Every case ends with exit 0/1/3, or 2
(click's usage error: a bad value is one), at most one error line, no exception, no hang, and no
file made by the shell metacharacters. Counts per command are printed for the issue's note."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzz_hostile import timing_rows
from fuzz_inproc import alarms, fake_scontrol, run_case

from minutiae.cli.main import main
from minutiae.testing.limits import memory_cap

VALUES = {"empty": "", "nan": "nan", "-1": "-1", "0": "0", "1e309": "1e309", "inf": "inf",
          "20 digits": "12345678901234567890", "long": "x" * 10_000, "newline": "a\nb",
          "url newline": "http://h:1\nX: y", "shell": "$(touch pwned1);`touch pwned2`|&;<>*"}
C = "http://127.0.0.1:1"     # nothing listens: refused at once
NC = ["check", "--no-nvml", "--kmsg", "{empty}"]
AG = ["agent", "--cycles", "1", "--no-follow", "--metrics-listen", "", "--state-dir", "st",
      "--no-nvml", "--kmsg", "{empty}"]
SV = ["serve", "--token-file", "{tok}", "--db", "c.db"]
SIM = ["sim", "--nodes", "2", "--days", "0.05", "--out", "o", "--quiet"]
LEARN = ["topo", "--learn", "{nccl}"]
RUNS = ["--runs", "{runs}"]
TEMPLATES = [
    # stragglers (--idle-exit: 0 means follow for ever, so not here; --poll is)
    ["stragglers", "{csv}", "--warmup", "{v}"], ["stragglers", "{csv}", "--false-alarms", "{v}"],
    ["stragglers", "{csv}", "--ranks-per-node", "{v}"], ["stragglers", "{csv}", "--layout", "{v}"],
    ["stragglers", "{csv}", "--min-slowdown", "{v}"], ["stragglers", "{v}"],
    ["stragglers", "--follow", "{csv}", "--idle-exit", "0.3", "--poll", "{v}"],
    ["stragglers", "{csv}", "--fleet", "{v}"],
    # slownodes
    ["slownodes", "{ds}", "--min-duration", "{v}"], ["slownodes", "{ds}", "--min-deficit", "{v}"],
    ["slownodes", "--prometheus", "{v}"], ["slownodes", "--prometheus", C, "--since", "{v}"],
    ["slownodes", "--prometheus", C, "--step", "{v}"], ["slownodes", "{v}"],
    ["slownodes", "{ds}", "--fleet", "{v}"], ["slownodes", "{ds}", "--jobs", "{v}"],
    # topo
    ["topo", "--from", "{topo}", "--plan", "--ranks", "{v}"],
    ["topo", "--from", "{topo}", "--plan", "--reserve-cores", "{v}"],
    ["topo", "--learn", "{v}"], [*LEARN, "--min-support", "{v}"], [*LEARN, "--workers", "{v}"],
    ["topo", "--from", "{v}"], ["topo", "--sysfs-root", "{v}"],
    ["topo", "--from", "{topo}", "--check", "--expect", "{v}"],
    # regress / whatchanged / impact
    ["regress", *RUNS, "--since", "{v}"], ["regress", *RUNS, "--job", "{v}"],
    ["regress", *RUNS, "--top", "{v}"], ["regress", *RUNS, "--run-id", "{v}"],
    ["regress", *RUNS, "--signature", "{v}"], ["regress", "--prom", "{v}"],
    ["regress", *RUNS, "--rollouts", "{v}"], ["regress", *RUNS, "--record-log", "{v}"],
    ["regress", "--db", "{v}"], ["regress", "--runs", "{v}"],
    ["whatchanged", "{v}", "{rid}", *RUNS], ["whatchanged", "{rid}", "{rid}", *RUNS, "--top", "{v}"],
    ["whatchanged", "{rid}", "{rid}", *RUNS, "--since", "{v}"],
    ["whatchanged", "{rid}", "{rid}", "--prom", "{v}"],
    ["impact", "--speedup", "{v}", "--where", "NCCL>=2.21", *RUNS],
    ["impact", "--speedup", "1%", "--where", "{v}", *RUNS],
    ["impact", "--speedup", "1%", "--where", "NCCL>=2.21", *RUNS, "--since", "{v}"],
    ["impact", "--speedup", "1%", "--where", "NCCL>=2.21", "--prom", "{v}"],
    # check (--slurm: the node name and slurm.conf reach scontrol's command line)
    [*NC, "--year", "{v}"], [*NC, "--expected-gpus", "{v}"], [*NC, "--expected-driver", "{v}"],
    [*NC, "--checks", "{v}"], [*NC, "--node", "{v}"], [*NC, "--dcgm", "{v}"],
    [*NC, "--slurm", "--node", "{v}"], [*NC, "--slurm", "--slurm-timeout", "{v}"],
    [*NC, "--slurm", "--slurm-conf", "{v}"], [*NC, "--sysfs-root", "{v}"],
    [*NC, "--proc-root", "{v}"], ["check", "--no-nvml", "--kmsg", "{v}"],
    [*NC, "--nvidia-smi-xml", "{v}"], [*NC, "--ibstat", "{v}"], [*NC, "--perfquery", "{v}"],
    [*NC, "--ibv-devinfo", "{v}"], [*NC, "--nvlink-status", "{v}"], [*NC, "--state-file", "{v}"],
    # sim
    [*SIM, "--seed", "{v}"], [*SIM, "--rate", "{v}"], [*SIM, "--start", "{v}"],
    [*SIM[:2], "{v}", *SIM[3:]], [*SIM[:4], "{v}", *SIM[5:]], [*SIM, "--rate-scale", "{v}"],
    [*SIM, "--noise-scale", "{v}"], [*SIM[:6], "{v}", *SIM[7:]], [*SIM, "--profile", "{v}"],
    # agent (--cycles N runs N times: a large N is a daemon, not a hang, so not here)
    [*AG, "--interval", "{v}"], [*AG, "--node", "{v}"], [*AG, "--domain", "{v}"],
    [*AG[:5], "{v}", *AG[6:]], [*AG[:7], "{v}", *AG[8:]],
    ["agent", "--controller", "{v}", "--token-file", "{tok}", *AG[1:]],
    ["agent", "--controller", C, "--token-file", "{v}", *AG[1:]],
    [*AG, "--expected-gpus", "{v}"], [*AG, "--checks", "{v}"], [*AG, "--dcgm", "{v}"],
    [*AG, "--sysfs-root", "{v}"], [*AG, "--nvidia-smi-xml", "{v}"],
    # the fleet commands (nothing listens at C: the values are checked before or fail to send)
    ["status", "--controller", "{v}"], ["nodes", "--controller", "{v}"],
    ["explain", "{v}", "--controller", C], ["explain", "gpu001", "--controller", "{v}"],
    ["pause", "--reason", "{v}", "--controller", C, "--token-file", "{tok}"],
    ["unpause", "--controller", C, "--token-file", "{v}"],
    ["jobs", "--tolerance", "{v}", "--controller", C, "--token-file", "{tok}"],
    ["jobs", "--forget", "{v}", "--controller", C, "--token-file", "{tok}"],
    ["resolve", "{v}", "--reason", "x", "--controller", C, "--token-file", "{tok}"],
    ["resolve", "gpu001", "--reason", "{v}", "--controller", C, "--token-file", "{tok}"],
    # neighbours
    ["neighbours", "--job-cpus", "{v}", "--interval", "0.01"],
    ["neighbours", "--job-cpus", "0-1", "--pid", "{v}", "--interval", "0.01"],
    ["neighbours", "--job-cpus", "0-1", "--interval", "{v}"],
    ["neighbours", "--job-cpus", "0-1", "--interval", "0.01", "--min-share", "{v}"],
    ["neighbours", "--job-cpus", "0-1", "--interval", "0.01", "--proc-root", "{v}"],
    ["neighbours", "--job-cpus", "0-1", "--interval", "0.01", "--cgroup-root", "{v}"],
    # serve (never binds: fuzz_inproc.no_server)
    [*SV[:1], "--listen", "{v}", *SV[1:]], [*SV, "--interval", "{v}"], [*SV, "--cluster", "{v}"],
    [*SV, "--controller-id", "{v}"], ["serve", "--token-file", "{tok}", "--db", "{v}"],
    [*SV, "--policy", "{v}"], [*SV, "--backend", "slurm", "--slurm-conf", "{v}"],
    [*SV, "--backend", "kubernetes", "--kubeconfig", "{v}"], [*SV, "--agent-tokens", "{v}"],
    [*SV, "--read-token-file", "{v}"], ["serve", "--config", "{v}"], ["serve", "--token-file", "{v}"],
    # the rest
    ["policy", "show", "--policy", "{v}"], ["eval", "{ds}", "--jobs", "{v}"], ["eval", "{v}"],
    ["backtest", "{ds}", "--step", "{v}"], ["backtest", "{ds}", "--maintenance-window", "{v}"],
    ["backtest", "{ds}", "--jobs", "{v}"], ["backtest", "{v}"],
    ["logscan", "--year", "{v}", "{empty}"], ["logscan", "{v}"],
    ["logscan", "--rules", "{v}", "{empty}"],
]
#: environment variables read as numbers, URLs, paths or tokens: (name, command that reads it)
ENV = [
    ("MINUTIAE_HEADER_TIMEOUT_S", SV), ("MINUTIAE_CONFIG", ["serve"]),
    ("MINUTIAE_TOKEN", ["serve", "--db", "c.db"]), ("MINUTIAE_READ_TOKEN", ["nodes", "--controller", C]),
    ("MINUTIAE_CONTROLLER", ["status"]), ("MINUTIAE_CLUSTER", SV), ("KUBECONFIG", [*SV, "--backend", "kubernetes"]),
    ("SLURM_CONF", [*SV, "--backend", "slurm"]), ("SLURMD_NODENAME", [*NC, "--slurm"]),
]
ENV_NAMES = ("MINUTIAE_TOKEN", "MINUTIAE_READ_TOKEN", "MINUTIAE_CONTROLLER", "MINUTIAE_CONFIG",
             "KUBECONFIG", "SLURM_CONF", "MINUTIAE_RECORD", "MINUTIAE_LEASE")
COUNTS: Counter[str] = Counter()
PER_COMMAND: dict[str, Counter[str]] = {}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from minutiae.history.export import format_runs_csv
    from minutiae.testing.synth.regress import FleetConfig, synth_fleet

    # an unbounded read fails the test with MemoryError instead of taking the machine
    with memory_cap():
        d = tmp_path_factory.mktemp("values")
        fleet = synth_fleet(FleetConfig(seed=5, signatures=4))
        (d / "runs.csv").write_text(format_runs_csv(fleet.records))
        (d / "t.csv").write_text(timing_rows())
        (d / "empty.log").write_text("")
        (d / "tok").write_text("fuzz-token-0123456789abc\n")
        path = fake_scontrol(d)
        assert main(["sim", "--nodes", "2", "--days", "0.05", "--out", str(d / "ds"), "--quiet"]) == 0
        data = Path(__file__).parents[1] / "data" / "nccl_topo_public"
        yield {"runs": str(d / "runs.csv"), "csv": str(d / "t.csv"), "empty": str(d / "empty.log"),
               "tok": str(d / "tok"), "ds": str(d / "ds"), "nccl": str(data),
               "topo": str(data / "oci-bm-gpu-h100-8-topology.xml"),
               "rid": sorted(fleet.records, key=lambda r: r.time)[3].run_id, "PATH": path}
        print(f"\nfuzz option values: {COUNTS['cases']} cases, {COUNTS['traceback']} tracebacks, "
              f"{COUNTS['hang']} hangs, {COUNTS['bad_exit']} bad exits, {COUNTS['shell']} shell")
        for cmd, c in sorted(PER_COMMAND.items()):
            print(f"  {cmd}: {c['cases']} cases, {c['cases'] - c['ok']} failed")


def _count(cmd: str, kind: str) -> None:
    COUNTS["cases"] += 1
    COUNTS[kind] += 1
    c = PER_COMMAND.setdefault(cmd, Counter())
    c["cases"] += 1
    c[kind] += 1


def _clean_env(monkeypatch: pytest.MonkeyPatch, inputs: dict[str, str]) -> None:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", inputs["PATH"])


@pytest.mark.parametrize("template", TEMPLATES, ids=[" ".join(t[:4]) for t in TEMPLATES])
def test_every_hostile_value_through_the_option(inputs: dict[str, str], template: list[str],
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    _clean_env(monkeypatch, inputs)
    failures = []
    with alarms():
        for name, value in VALUES.items():
            cwd = tmp_path / f"v{len(failures)}-{sorted(VALUES).index(name)}"
            cwd.mkdir()
            monkeypatch.chdir(cwd)
            argv = [a.format(v=value, **inputs) for a in template]
            out = run_case(argv, lambda: capsys.readouterr().err, cwd, exits=(0, 1, 2, 3))
            _count(template[0], out.kind)
            if out.problem:
                failures.append(f"{name}: {out.problem}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("env", "argv"), ENV, ids=[e for e, _ in ENV])
def test_every_hostile_value_through_the_environment(inputs: dict[str, str], env: str,
                                                     argv: list[str],
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    _clean_env(monkeypatch, inputs)
    failures = []
    with alarms():
        for i, (name, value) in enumerate(VALUES.items()):
            cwd = tmp_path / f"e{i}"
            cwd.mkdir()
            monkeypatch.chdir(cwd)
            monkeypatch.setenv(env, value)
            out = run_case([a.format(**inputs) for a in argv],
                           lambda: capsys.readouterr().err, cwd, exits=(0, 1, 2, 3))
            _count(f"env {env}", out.kind)
            if out.problem:
                failures.append(f"{name}: {out.problem}")
    assert not failures, "\n".join(failures)

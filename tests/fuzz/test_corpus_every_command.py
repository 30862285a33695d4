"""The hostile corpus (``fuzz_hostile.make_corpus``) through every command that takes a file,
in process (``minutiae.cli.main.main``, as the console script runs it): every run returns an
exit code in {0, 1, 3} (2 only for a usage error, never for a file), at most one error line, no
exception escapes, none hangs (a CPU-time alarm, ITIMER_PROF: a shared machine's load stretches
wall time, not the CPU a loop burns; a wall-clock backstop catches a blocked read). Peak RSS is measured in test_hostile_commands (per
child); here the counts are printed for the issue's closing note."""

from __future__ import annotations

import resource
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from fuzz_hostile import make_corpus

from minutiae.cli.main import main

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
]
#: templates that write to ``{f}``: run only on the corpus's own files, never on a device such as
#: /dev/zero (a regression would replace the machine's device node)
WRITES = ("--state-file",)
HANG_S = 20          # CPU seconds one case may burn
HANG_WALL_S = 300    # wall seconds one case may take (blocked, not burning CPU)
COUNTS = {"cases": 0, "tracebacks": 0, "hangs": 0, "bad_exit": 0}


class Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    # an unbounded read fails the test with MemoryError instead of taking the machine
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, hard))
    d = tmp_path_factory.mktemp("corpus")
    files = make_corpus(d)
    files.pop("2 GiB sparse")          # bounded by size up front; in test_hostile_commands
    (d / "empty.log").write_text("")
    # a real dataset for the commands whose other inputs are a directory (slownodes, backtest)
    assert main(["sim", "--nodes", "2", "--days", "0.05", "--out", str(d / "dataset"), "--quiet"]) == 0
    yield files
    print(f"\nfuzz corpus: {COUNTS['cases']} cases, {COUNTS['tracebacks']} tracebacks, "
          f"{COUNTS['hangs']} hangs, {COUNTS['bad_exit']} bad exits")
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.parametrize("template", TEMPLATES, ids=[" ".join(t[:2]) for t in TEMPLATES])
def test_every_hostile_file_through_the_command(corpus: dict[str, Path], template: list[str],
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    empty = next(iter(corpus.values())).parent / "empty.log"
    failures = []
    old = signal.signal(signal.SIGALRM, _alarm), signal.signal(signal.SIGPROF, _alarm)
    try:
        for name, path in corpus.items():
            if any(w in template for w in WRITES) and path.parent != empty.parent:
                continue
            argv = [a.format(f=path, empty=empty, dataset=empty.parent / "dataset",
                             out=tmp_path / "out") for a in template]
            COUNTS["cases"] += 1
            signal.setitimer(signal.ITIMER_PROF, HANG_S)
            signal.setitimer(signal.ITIMER_REAL, HANG_WALL_S)
            try:
                rc = main(argv)
            except Hang:
                COUNTS["hangs"] += 1
                failures.append(f"{name}: hung > {HANG_S} CPU s or {HANG_WALL_S} s")
                continue
            except SystemExit as exc:   # click's own exits
                rc = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:  # noqa: BLE001 - counting what escaped is the test
                COUNTS["tracebacks"] += 1
                failures.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
                continue
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.setitimer(signal.ITIMER_REAL, 0)
            err = capsys.readouterr().err
            errors = [ln for ln in err.splitlines() if ln.startswith("minutiae: error")]
            if rc not in (0, 1, 3) or len(errors) > 1 or "Traceback" in err:
                COUNTS["bad_exit"] += 1
                failures.append(f"{name}: exit {rc}: {err.strip()[-300:]}")
    finally:
        signal.signal(signal.SIGALRM, old[0])
        signal.signal(signal.SIGPROF, old[1])
    assert not failures, "\n".join(failures)

"""Each hostile input of issue 16 through the commands that used to break on it: one line, exit
3, no traceback, peak RSS ≤ 300 MB (measured per child with ``os.wait4``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz_hostile import MAX_RSS_MB, make_corpus, run_cli

ROOT = Path(__file__).parents[2]

CASES = [
    (["stragglers"], "rank 2**32", "rank id 4294967296"),
    (["stragglers"], "/dev/zero", "/dev/zero"),
    (["stragglers"], "2 GiB sparse", "binary data"),
    (["stragglers"], "CR-only duplicated header", ""),
    (["regress", "--runs"], "/dev/zero", "binary data"),
    (["regress", "--runs"], "2 GiB sparse", "limit"),
    (["logscan"], "/dev/zero", "not a kernel log"),
    (["check", "--no-nvml", "--kmsg"], "/dev/zero", ""),
    # it read the whole 2 GiB into one growing line (quadratic copies: 30 CPU s, 439 MB, killed)
    (["check", "--no-nvml", "--kmsg"], "2 GiB sparse", ""),
    # read whole on main (MemoryError under the 8 GiB cap of test_corpus_every_command)
    (["serve", "--config"], "/dev/zero", "cannot read config"),
    (["unpause", "--controller", "http://127.0.0.1:1", "--token-file"], "/dev/zero",
     "cannot read token"),
    (["stragglers", "--follow", "--idle-exit", "1"], "/dev/zero", "not a regular file"),
    (["topo", "--from", "tests/data/nccl_topo_public/oci-bm-gpu-h100-8-topology.xml", "--check",
      "--expect"], "/dev/zero", "binary data"),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_corpus(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize(("cmd", "name", "says"), CASES, ids=[f"{c[0]}-{n}" for c, n, _ in CASES])
def test_hostile_input_is_one_line_exit_3_bounded(corpus: dict[str, Path], tmp_path: Path,
                                                   cmd: list[str], name: str, says: str) -> None:
    cmd = [str(ROOT / c) if c.startswith("tests/") else c for c in cmd]
    r = run_cli([*cmd, str(corpus[name])], tmp_path)
    assert not r.hung and not r.traceback, r.stderr[-2000:]
    assert r.rc == 3, (r.rc, r.stderr[-500:])
    assert r.rss_mb <= MAX_RSS_MB, r.rss_mb
    if cmd[0] == "check":   # a report on stdout; the kernel-log source is UNKNOWN
        return
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("minutiae: error"), r.stderr
    assert says in lines[0], lines[0]


def test_a_20_digit_megatron_iteration_is_skipped_with_a_warning(corpus: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    """It overflowed int64 (a traceback); the line is now skipped and named, the rest analysed."""
    r = run_cli(["stragglers", str(corpus["megatron 20-digit iteration"])], tmp_path)
    assert r.rc == 0 and not r.traceback and r.rss_mb <= MAX_RSS_MB, r.stderr[-500:]
    assert "minutiae: warning: skip" in r.stderr


@pytest.mark.parametrize(("code", "cpu_s", "wall_s", "hung"), [
    ("while True: pass", 1, 120.0, True),            # a loop: its CPU limit, whatever the load
    ("import time; time.sleep(60)", 30, 2.0, True),  # blocked, no CPU burnt: the wall backstop
    ("import time; time.sleep(1)", 1, 120.0, False),  # a second asleep is no CPU: not hung
], ids=["busy-loop", "blocked", "sleeps-1s"])
def test_the_hang_guard_is_cpu_time_with_a_wall_backstop(tmp_path: Path, code: str, cpu_s: int,
                                                         wall_s: float, hung: bool) -> None:
    r = run_cli([code], tmp_path, cpu_s=cpu_s, wall_s=wall_s, python=("-c",))
    assert r.hung is hung, (r.rc, r.seconds, r.stderr[-300:])
    assert r.seconds < 100, r.seconds
